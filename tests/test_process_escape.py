"""No process a command starts survives terminate, a timeout, or kill -9 of the server and a
restart, whatever it does to leave its session: double fork, ``setsid -f``, a daemonising
Python, children ignoring SIGTERM and SIGHUP. With the sandbox off (no PID namespace to
catch them), through real ``codespace serve`` subprocesses, as root and as an unprivileged
user, with each tracking mechanism: a cgroup v2 per command, and the keeper (subreaper)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client

from codespace.processes.tracking import _cgroup2_mount, _own_cgroup
from codespace.testing import call_ok, server_pids

from .servers import UNPRIVILEGED, alive, make_dir, serve_params, shared_tmp

pytestmark = pytest.mark.anyio

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # runnable by any user


def _escapers_script(token: str, then: str = "exec sleep 300") -> str:
    """A command starting four escapers, each with ``token`` and its index in its argv (found
    through /proc on the host, so a PID namespace's numbering does not matter), then ``then``."""
    return " ".join([
        f"(sh -c 'trap \"\" TERM HUP; exec sleep 300.{token}0' &) ;",  # double fork
        f"setsid -f sh -c 'trap \"\" TERM HUP; exec sleep 300.{token}1';",
        f"{PY} -I -S -c '"  # a daemonising Python: fork, setsid, fork, signals ignored
        "import os, signal, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)]\n"
        f"time.sleep(300)' {token}2 ;",
        f"sh -c 'trap \"\" TERM HUP INT; : {token}3; while :; do sleep 1; done' & ",
        f"echo started; {then}",
    ])


NAMES = ("double_fork", "setsid", "daemon_python", "ignores_signals")


def _find(token: str) -> dict[str, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        for i, name in enumerate(NAMES):
            # The leader (and any wrapper around it) holds the whole script: "echo started" too.
            if f"{token}{i}" in argv and "echo started" not in argv and alive(int(entry)):
                found.setdefault(name, int(entry))
    return found


def _escapers(token: str) -> dict[str, int]:
    deadline = time.monotonic() + 20
    found: dict[str, int] = {}
    while time.monotonic() < deadline:
        found = _find(token)
        if len(found) == len(NAMES):
            return found
        time.sleep(0.05)
    raise AssertionError(f"the escapers did not all start: {found}")


async def _gone(pids: dict[str, int], within: float = 8.0) -> dict[str, int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        if not left:
            return {}
        await anyio.sleep(0.05)
    return {name: pid for name, pid in pids.items() if alive(pid)}


def _cleanup(pids: dict[str, int]) -> None:
    for pid in pids.values():
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def _delegated_cgroup(uid: int):
    """A cgroup v2 subtree delegated to ``uid`` (as systemd's Delegate=yes makes), and the argv
    prefix that starts the server inside it."""
    mount, own = _cgroup2_mount(), _own_cgroup()
    if os.geteuid() != 0 or mount is None or own is None:
        pytest.skip("needs root and a cgroup v2 mount to delegate a subtree")
    path = Path(mount + own.rstrip("/")) / f"cs-delegated-{secrets.token_hex(4)}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup to delegate: {exc}")
    for name in ("", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"):
        os.chown(path / name if name else path, uid, uid)
    try:
        yield ["/bin/sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "join"]
    finally:
        for _ in range(100):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                for dirpath, dirnames, _ in os.walk(path, topdown=False):
                    for d in dirnames:
                        try:
                            (Path(dirpath) / d).joinpath("cgroup.kill").write_text("1")
                            os.rmdir(Path(dirpath) / d)
                        except OSError:
                            pass
                time.sleep(0.05)


SETUPS = ["root-cgroup", "root-keeper", "user-keeper", "user-cgroup"]


@contextmanager
def _setup(name: str):
    """(uid, prefix, env, expected mechanism) for one way of running the server."""
    if name == "root-cgroup":
        if os.geteuid() != 0 or _cgroup2_mount() is None:
            pytest.skip("needs root and cgroup v2")
        yield None, [], {}, "cgroup"
    elif name == "root-keeper":
        yield None, [], {"CODESPACE_CGROUP": "off"}, "subreaper"
    elif name == "user-keeper":
        if os.geteuid() != 0:
            pytest.skip("needs root to start a server as another user")
        yield UNPRIVILEGED, [], {}, "subreaper"
    else:
        with _delegated_cgroup(UNPRIVILEGED) as prefix:
            yield UNPRIVILEGED, prefix, {}, "cgroup"


def _dirs(uid: int | None, sandbox: str) -> tuple[Path, Path, Path, Path, Path]:
    base = shared_tmp("cs-escape-", uid)
    ws, state, home = (make_dir(base / n, uid) for n in ("ws", "state", "home"))
    policy = base / "policy.toml"
    if sandbox == "off":
        policy.write_text('[sandbox]\nmode = "off"\n')
    else:
        policy.write_text(f'[sandbox]\nmode = "required"\nengine = "{sandbox}"\n')
    return base, ws, state, home, policy


def _engine_works(engine: str) -> bool:
    from codespace import kernel

    if engine == "bubblewrap":
        return kernel.bubblewrap().ok and kernel.user_namespaces().ok
    return kernel.landlock_abi().ok


CASES = [(setup, "off") for setup in SETUPS] + [
    (setup, engine) for setup in ("root-cgroup", "user-keeper") for engine in ("bubblewrap", "landlock")
]


@pytest.mark.parametrize(("setup", "sandbox"), CASES, ids=[f"{a}-sandbox_{b}" for a, b in CASES])
@pytest.mark.parametrize("ending", ["terminate", "timeout", "kill9_restart", "leader_exits"])
async def test_no_process_survives(setup, sandbox, ending):
    if sandbox != "off" and not _engine_works(sandbox):
        pytest.skip(f"the {sandbox} engine does not work here")
    with _setup(setup) as (uid, prefix, env, mechanism):
        base, ws, state, home, policy = _dirs(uid, sandbox)
        params = serve_params(ws, state, home, uid=uid, policy=policy, prefix=prefix, **env)
        pids: dict[str, int] = {}
        try:
            async with Client(params) as client:
                info = await call_ok(client, "workspace_info")
                assert info["sandbox"]["process_tracking"]["mechanism"] == mechanism, info["sandbox"]
                token = str(secrets.randbelow(10**8)).zfill(8)
                # leader_exits: found by testing, a root server's cgroup kept what a finished
                # command left running until shutdown (the keeper and the sandbox ended it)
                then = "sleep 2" if ending == "leader_exits" else "exec sleep 300"
                args = {"command": _escapers_script(token, then), "yield_ms": 500}
                if ending == "timeout":
                    args["timeout_ms"] = 3000
                started = await call_ok(client, "exec", args)
                assert started["running"] and "started" in started["output"], (started["output"], started.get("note"))
                pids = _escapers(token)
                pids["leader"] = started["pid"]
                assert all(alive(p) for p in pids.values())
                if ending == "terminate":
                    done = await call_ok(client, "terminate", {"session_id": started["session_id"], "grace_ms": 300})
                    assert not done["running"]
                elif ending == "leader_exits":  # its output not read: reading would end the session
                    with anyio.fail_after(15):
                        while (await call_ok(client, "list_sessions"))["sessions"][0]["running"]:
                            await anyio.sleep(0.1)
                    left = await _gone(pids)
                    assert not left, f"survived the end of their command ({setup}): {left}"
                elif ending == "timeout":
                    with anyio.fail_after(15):
                        while True:
                            polled = await call_ok(client, "read_output", {"session_id": started["session_id"],
                                                                           "wait_ms": 500})
                            if not polled["running"]:
                                break
                    assert polled["timed_out"]
                else:
                    (server,) = server_pids(state)
                    os.kill(server, signal.SIGKILL)
            if ending == "kill9_restart":
                async with Client(params) as client:  # the restart's clean-up
                    await call_ok(client, "workspace_info")
                    left = await _gone(pids)
            else:
                left = await _gone(pids)
            assert not left, f"survived {ending} ({setup}): {left}"
        finally:
            _cleanup(pids)
            subprocess.run(["rm", "-rf", str(base)], check=False)


def test_doctor_names_the_tracking_mechanism(tmp_path):
    ws = make_dir(tmp_path / "ws")
    env = {**os.environ, "HOME": str(make_dir(tmp_path / "home"))}
    for extra, expected in (({"CODESPACE_CGROUP": "off"}, "subreaper"), ({}, None)):
        out = subprocess.run(
            [sys.executable, "-m", "codespace", "doctor", "--json", "--workspace", str(ws),
             "--state-dir", str(tmp_path / "state")],
            capture_output=True, text=True, env={**env, **extra}, timeout=120,
        )
        checks = {c["name"]: c for c in json.loads(out.stdout)}
        tracking = checks["process tracking"]
        mechanism = tracking["detail"].split(":", 1)[0]
        assert mechanism in ("cgroup", "subreaper")
        if expected:
            assert mechanism == expected
        elif os.geteuid() == 0 and _cgroup2_mount() is not None:
            assert mechanism == "cgroup", tracking


def test_a_live_servers_cgroups_are_not_reaped(tmp_path):
    """A second server on the same state directory (maybe in another PID namespace, where the
    first one's pid means nothing) leaves the first one's cgroups alone; once the first is gone
    (its lock free), the next start reaps them."""
    from codespace.processes.tracking import Tracker

    if os.geteuid() != 0 or _cgroup2_mount() is None:
        pytest.skip("needs root and cgroup v2")
    state = make_dir(tmp_path / "state")
    first = Tracker(state)
    first.start()
    assert first.mechanism == "cgroup", first.detail
    try:
        group = first.new_group()
        sleeper = subprocess.Popen(["/bin/sh", "-c", 'echo 0 > "$0/cgroup.procs"; exec sleep 300', str(group)])
        time.sleep(0.3)
        second = Tracker(state)
        second.start()
        second.stop()
        assert group.exists() and alive(sleeper.pid), "a live server's cgroup was reaped"
        os.close(first._lock_fd)  # the first server dies: its lock is released
        first._lock_fd = None
        third = Tracker(state)
        third.start()
        third.stop()
        sleeper.wait(timeout=5)
        assert not group.exists()
    finally:
        first.stop()

"""``[sandbox] max_processes`` for commands that run without a sandbox.

A sandboxed command's limit is counted in its own user namespace (codespace-linux-sandbox's
tests). An unsandboxed one had none: a fork bomb in it took the host down. Where the host
mounts a cgroup v1 ``pids`` hierarchy the server may write (root on a host with hybrid cgroups,
as CI's), each unsandboxed command's cgroup has a mirror there with ``pids.max`` set; the
server says where it cannot. Real forks, real cgroups, real servers killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from codespace.processes.pids_limit import pids_v1_dir
from codespace.processes.tracking import Tracker
from codespace.testing import WORKER_ENV, call_error, call_ok, connect, server_pids

from .servers import UNPRIVILEGED, alive, make_dir, serve_params, shared_tmp

pytestmark = pytest.mark.anyio

PIDS = pids_v1_dir()
needs_pids = pytest.mark.skipif(
    PIDS is None or os.geteuid() != 0 or not os.access(PIDS, os.W_OK),
    reason="needs root and a writable cgroup v1 pids hierarchy (hybrid cgroups, as CI's host has)",
)
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# Forks until the kernel refuses, each child sleeping (they are the command's to clean up).
FORKS = (
    "import os, sys, time\n"
    "n = 0\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as exc:\n"
    "        print('refused', exc.errno); break\n"
    "    if pid == 0:\n"
    "        time.sleep(60); os._exit(0)\n"
    "    n += 1\n"
    "print('forked', n, flush=True)\n"
)


def _policy(max_processes: int) -> str:
    return f'[sandbox]\nmode = "off"\nmax_processes = {max_processes}\n'


def _mirrors(state: Path) -> list[Path]:
    """This state directory's servers' directories in the pids hierarchy."""
    prefix = Tracker(state)._prefix
    assert PIDS is not None
    return [PIDS / n for n in os.listdir(PIDS) if n.startswith(prefix)]


def _groups(server_dir: Path) -> list[Path]:
    return [p for p in server_dir.iterdir() if p.is_dir()]


def _sleepers(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ") if entry.isdigit() else b""
            if mark.encode() in argv and b"echo up" not in argv:
                found.append(int(entry))
        except OSError:
            continue
    return [p for p in found if alive(p)]


@needs_pids
async def test_an_unsandboxed_commands_forks_stop_at_the_limit(make_app, state):
    async with connect(make_app(_policy(40))) as client:
        done = await call_ok(client, "exec", {"command": [PY, "-I", "-S", "-c", FORKS, "200"], "timeout_ms": 60_000})
        info = await call_ok(client, "workspace_info")  # after a command: a worker runs them, if one is set
        assert "pids.max" in info["sandbox"]["process_tracking"]["unsandboxed_process_limit"], info["sandbox"]
        out = done["output"]
        assert "refused 11" in out, out  # EAGAIN
        forked = int(out.split("forked ")[1].split()[0])
        assert 30 <= forked < 40, out  # the limit counts the stub's and python's own process too
        # Finished: its sleepers are killed and both its cgroups go (just after the answer).
        (server_dir,) = _mirrors(state)
        deadline = time.monotonic() + 5
        while _groups(server_dir) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert _groups(server_dir) == []
    assert _mirrors(state) == []  # the server's own directory goes with it


@needs_pids
async def test_a_command_whose_limit_cannot_be_set_does_not_run(make_app, ws, tmp_path):
    if os.environ.get(WORKER_ENV):
        pytest.skip("the commands run in the worker, whose tracker is another process's")
    app = make_app(_policy(40))
    async with connect(app) as client:
        limits = app.processes.tracker.limits
        real, limits.directory = limits.directory, tmp_path / "not-a-cgroup"  # no pids.max to write there
        limits.directory.mkdir()
        try:
            failed = await call_error(client, "exec", {"command": ["touch", "ran"]})
        finally:
            limits.directory = real
        assert failed["code"] == "spawn_failed", failed
        assert "[sandbox] max_processes = 40" in failed["message"] and "did not run" in failed["message"], failed
        assert not (ws / "ran").exists()
        assert list((tmp_path / "not-a-cgroup").iterdir()) == []  # its mirror was removed
        assert (await call_ok(client, "exec", {"command": ["touch", "ran"]}))["exit_code"] == 0  # the next one runs


@needs_pids
async def test_no_limit_when_max_processes_is_0(make_app, state):
    async with connect(make_app(_policy(0))) as client:
        done = await call_ok(client, "exec", {"command": [PY, "-I", "-S", "-c", FORKS, "60"], "timeout_ms": 60_000})
        assert "forked 60" in done["output"], done["output"]
        assert _groups(_mirrors(state)[0]) == []  # and nothing is left behind


@needs_pids
async def test_a_limited_terminal_session(ws, state):
    async with connect(ws, state_dir=state, policy=_policy(40), plugins=("pty",)) as client:
        started = await call_ok(client, "exec", {
            "command": [PY, "-I", "-S", "-c", FORKS, "200"], "tty": True, "yield_ms": 30_000})
        assert "refused 11" in started["output"], started


@needs_pids
async def test_a_killed_servers_limited_commands_die_at_the_next_start(tmp_path):
    ws, state, home = tmp_path / "ws", tmp_path / "state", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(_policy(40))
    params = serve_params(ws, state, home, policy=policy)
    mark = "sleep 287.53"
    async with Client(params) as client:  # a real `codespace serve` over stdio
        await call_ok(client, "exec", {"command": f"{mark} & {mark} & echo up; wait", "yield_ms": 500})
        deadline = time.monotonic() + 10
        while len(_sleepers(mark)) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert len(_sleepers(mark)) == 2
        (mirror,) = _mirrors(state)
        held = [int(p) for d in mirror.iterdir() if d.is_dir() for p in (d / "cgroup.procs").read_text().split()]
        assert set(_sleepers(mark)) <= set(held)
        for pid in server_pids(ws):
            os.kill(pid, signal.SIGKILL)
    try:
        async with Client(params) as client:  # the next server of this state directory
            await call_ok(client, "workspace_info")
            assert mirror not in _mirrors(state)
            assert not mirror.exists()
            deadline = time.monotonic() + 5
            while _sleepers(mark) and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            assert _sleepers(mark) == []
    finally:
        for pid in _sleepers(mark):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a server as another user (as itself, the "
                    "doctor test above sees the same)")
def test_an_unprivileged_server_says_its_unsandboxed_commands_are_not_limited():
    base = shared_tmp("cs-nolimit-", UNPRIVILEGED)
    ws, home = make_dir(base / "ws", UNPRIVILEGED), make_dir(base / "home", UNPRIVILEGED)
    params = serve_params(ws, base / "state", home, uid=UNPRIVILEGED)
    script = (
        "import anyio, json, sys\n"
        "from mcp import Client\n"
        "from mcp.client.stdio import StdioServerParameters\n"
        "async def main():\n"
        f"    params = StdioServerParameters(command={params.command!r}, args={params.args!r}, env={params.env!r})\n"
        "    async with Client(params) as c:\n"
        "        r = await c.call_tool('workspace_info', {})\n"
        "        print(json.dumps(r.structured_content['sandbox']['process_tracking']))\n"
        "anyio.run(main)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    tracking = json.loads(done.stdout.strip().splitlines()[-1])
    assert tracking["unsandboxed_process_limit"].startswith("none"), tracking


def test_doctor_says_how_unsandboxed_commands_are_limited(tmp_path):
    ws = make_dir(tmp_path / "ws")
    env = {**os.environ, "HOME": str(make_dir(tmp_path / "home"))}
    limited = PIDS is not None and os.geteuid() == 0 and os.access(PIDS, os.W_OK)
    for extra, expected in (({"CODESPACE_CGROUP": "off"}, "none"), ({}, "[sandbox] max_processes" if limited else "none")):
        out = subprocess.run(
            [sys.executable, "-m", "codespace", "doctor", "--json", "--workspace", str(ws),
             "--state-dir", str(tmp_path / "state")],
            capture_output=True, text=True, env={**env, **extra}, timeout=120,
        )
        checks = {c["name"]: c for c in json.loads(out.stdout)}
        assert checks["process limit of unsandboxed commands"]["detail"].startswith(expected), checks
    if PIDS is not None:
        assert _mirrors(tmp_path / "state") == []  # doctor's probe leaves nothing behind

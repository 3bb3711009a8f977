"""The fast path: per-command helpers forked by the warm helper (zygote) with clone(CLONE_PARENT).

What must hold exactly as for a helper started per command (the other tests run both ways
through the ``start`` fixture): handshake v1, engines, probes, signals, clean-up. Here:
the process tree, the zygote's own hardening and lifetime, fallbacks, and a killed server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from codespace_linux_sandbox.backend import HELPER_SCRIPT, ZYGOTE, LinuxSandbox, _memfd, helper_argv
from codespace_linux_sandbox.helper import SETUP_FAILED_EXIT_CODE
from codespace_linux_sandbox.launcher import Zygote, ZygoteUnavailable
from codespace_linux_sandbox.protocol import Command, Handshake, Options, Policy
from conftest import Launch, live_pids_in, make_env

from codespace.sandboxing import layout_for


def _stat(pid: int) -> list[str] | None:
    """Fields after the command name in /proc/<pid>/stat (state first), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _wait_gone(pids: list[int], marker: str | None = None, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids) and (marker is None or not live_pids_in([marker])):
            return
        time.sleep(0.05)
    left = [p for p in pids if _alive(p)] + (live_pids_in([marker]) if marker else [])
    raise AssertionError(f"still alive after {timeout}s: {left}")


def test_helpers_are_children_of_the_server_and_lead_their_session(sandbox_env):
    env = sandbox_env
    proc = Launch(env.sandbox, env.command(["/bin/sh", "-c", "echo ready; exec sleep 30"]), layout_for(env.workspace))
    try:
        assert proc.stdout.readline() == b"ready\n"
        fields = _stat(proc.pid)
        ppid, pgid, sid = int(fields[1]), int(fields[2]), int(fields[3])
        assert ppid == os.getpid()  # clone(CLONE_PARENT): our child, not the zygote's
        assert pgid == sid == proc.pid  # the group and session the host signals and sweeps
        zygote = env.sandbox.zygote.pid
        assert zygote is not None and zygote != ppid and int(_stat(zygote)[1]) == os.getpid()
        assert int(_stat(zygote)[3]) == zygote  # the zygote has a session of its own
    finally:
        proc.kill()
        proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL


def test_a_launched_helper_already_leads_its_session(sandbox_env):
    """The pid launch returns is a session leader at once: a host that signals its group right
    away (a 1 ms timeout) otherwise found no such group, and the helper, unsignalled, ran the
    command (3 of 600 kills spread over 40 ms, before the zygote waited for the child's setsid)."""
    if sandbox_env.start != "launch":
        pytest.skip("the fast path's own guarantee")
    for _ in range(100):
        proc = Launch(sandbox_env.sandbox, sandbox_env.command(["/bin/true"]), layout_for(sandbox_env.workspace))
        fields = _stat(proc.pid)
        try:
            assert fields is not None and int(fields[2]) == int(fields[3]) == proc.pid, fields
        finally:
            proc.communicate(timeout=20)


def test_the_zygote_is_hardened():
    assert ZYGOTE.acquire() and ZYGOTE.wait_ready()
    try:
        pid = ZYGOTE.pid
        with open(f"/proc/{pid}/limits") as f:
            core = next(line for line in f if line.startswith("Max core file size"))
        assert core.split()[4:6] == ["0", "0"]
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        assert "NoNewPrivs:\t0" in status  # it runs bwrap, which needs its own privileges
        if os.geteuid() != 0:  # non-dumpable: its environment is root's to read, not our uid's
            with pytest.raises(PermissionError):
                open(f"/proc/{pid}/environ", "rb")
            return
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert not any(item.startswith(b"LD_") for item in f.read().split(b"\0"))
    finally:
        ZYGOTE.release()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to start the zygote as another user")
def test_the_zygote_is_not_dumpable_as_an_ordinary_user(tmp_path):
    """As an unprivileged user (where dumpability shows): /proc/<pid> of a non-dumpable
    process belongs to root, and LD_* given to it are gone from its environment."""
    python = next((p for p in ("/usr/bin/python3.11", "/usr/bin/python3") if os.access(p, os.X_OK)), None)
    setpriv = shutil.which("setpriv")
    if python is None or setpriv is None:
        pytest.skip("needs a system python3 readable by 'nobody' and setpriv")
    probe = subprocess.run([setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", python, "-I", "-S",
                            "-c", f"open({HELPER_SCRIPT!r}).close()"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the helper is not readable by 'nobody' here")
    zygote = Zygote(lambda: [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
                             "/usr/bin/env", "LD_CODESPACE_TEST=1", python, "-I", "-S", HELPER_SCRIPT])
    assert zygote.acquire() and zygote.wait_ready(), zygote.problem
    try:
        pid = zygote.pid
        with open(f"/proc/{pid}/status") as f:
            assert next(line for line in f if line.startswith("Uid:")).split()[1] == "65534"
        assert os.stat(f"/proc/{pid}/status").st_uid == 0  # non-dumpable
    finally:
        zygote.release()


def _handshake_request(sandbox: LinuxSandbox, raw: bytes) -> tuple[int, str]:
    """Send a raw handshake through the zygote; (exit status, stderr) of the per-command helper."""
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    payload = _memfd("test-handshake", raw)
    try:
        pid = sandbox.zygote.request([null, null, err_w, payload])
    finally:
        for fd in (null, err_w, payload):
            os.close(fd)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(err_r, "rb") as err:
        return os.waitstatus_to_exitcode(status), err.read().decode()


def _valid(env) -> dict:
    return json.loads(Handshake(
        engine="bubblewrap", command=Command(argv=["/bin/true"], cwd=str(env.ws), env={}),
        policy=Policy(readable=["/"], writable=[], deny_read=[], protected=[], network="off"),
        options=Options(seccomp="none", bwrap="/usr/bin/bwrap", run_dir=str(env.base), run_as=env.sandbox.run_as()),
    ).encode())


def test_handshake_v1_is_checked_through_the_fast_path(base):
    env = make_env(base, "bubblewrap", start="launch")
    data = _valid(env)
    code, err = _handshake_request(env.sandbox, json.dumps({**data, "version": 2}).encode())
    assert code == SETUP_FAILED_EXIT_CODE and "version 2" in err and "version 1" in err
    assert err.startswith("codespace-linux-sandbox:")
    del data["policy"]["writable"]
    code, err = _handshake_request(env.sandbox, json.dumps(data).encode())
    assert code == SETUP_FAILED_EXIT_CODE and "'policy.writable' is missing" in err
    data = _valid(env)
    data["options"]["seccomp"] = "restricted"
    code, err = _handshake_request(env.sandbox, json.dumps(data).encode())
    assert code == SETUP_FAILED_EXIT_CODE and "refusing to run unfiltered" in err
    code, _ = _handshake_request(env.sandbox, json.dumps(_valid(env)).encode())
    assert code == 0  # and the zygote still serves


def test_a_malformed_request_is_refused_and_the_zygote_goes_on(base):
    env = make_env(base, "bubblewrap", start="launch")
    null = os.open(os.devnull, os.O_RDWR)
    try:
        with pytest.raises(ZygoteUnavailable, match="malformed request"):
            env.sandbox.zygote.request([null, null])
    finally:
        os.close(null)
    code, out, _ = env.run(["/bin/sh", "-c", "echo still-serving"])
    assert (code, out) == (0, "still-serving\n")


def test_a_large_environment_travels_in_the_memfd(base):
    env = make_env(base, "bubblewrap", start="launch")
    big = {f"BIG{i}": "x" * 80_000 for i in range(4)}  # more than a pipe's or a socket's buffer holds
    code, out, err = env.run(["/bin/sh", "-c", 'echo $((${#BIG0} + ${#BIG1} + ${#BIG2} + ${#BIG3}))'], env=big)
    assert (code, out) == (0, "320000\n"), err


def test_a_dead_zygote_is_replaced_and_a_hung_one_falls_back(base, engine, monkeypatch):
    from codespace_linux_sandbox import launcher

    zygote = Zygote(helper_argv)
    env = make_env(base, engine, start="launch")
    env.sandbox = LinuxSandbox(engine, env.workspace.state_dir, zygote=zygote)
    layout = layout_for(env.workspace)
    try:
        first = Launch(env.sandbox, env.command(["/bin/sh", "-c", "echo one"]), layout)
        assert first.communicate(timeout=20)[0] == b"one\n"
        dead = zygote.pid
        os.kill(dead, signal.SIGKILL)
        time.sleep(0.1)
        second = Launch(env.sandbox, env.command(["/bin/sh", "-c", "echo two"]), layout)  # a new zygote
        assert second.communicate(timeout=20)[0] == b"two\n"
        assert zygote.pid not in (None, dead) and "commands fork from the warm helper" in env.sandbox.info().detail
        # A zygote that stops answering mid-request: this command starts a helper of its own.
        monkeypatch.setattr(launcher, "REPLY_TIMEOUT_S", 0.5)
        os.kill(zygote.pid, signal.SIGSTOP)
        launched = env.sandbox.launch_now(env.command(["/bin/true"]), layout, (0, 1, 2))
        assert not launched.forked
        _, status = os.waitpid(launched.pid, 0)
        launched.release()
        assert os.waitstatus_to_exitcode(status) == 0
        assert "stopped answering" in env.sandbox.info().detail
        third = Launch(env.sandbox, env.command(["/bin/sh", "-c", "echo three"]), layout)
        assert third.communicate(timeout=20)[0] == b"three\n"
    finally:
        zygote.stop()


def test_when_the_zygote_cannot_start_every_command_starts_its_own_helper(base):
    zygote = Zygote(lambda: ["/nonexistent/python"])
    env = make_env(base, "bubblewrap", start="launch")
    env.sandbox = LinuxSandbox("bubblewrap", env.workspace.state_dir, zygote=zygote)
    layout = layout_for(env.workspace)
    for _ in range(4):  # after three failures in a row it is not tried again
        out_r, out_w = os.pipe()
        launched = env.sandbox.launch_now(env.command(["/bin/sh", "-c", "echo slow-path; exit 3"]), layout,
                                          (0, out_w, 2))
        os.close(out_w)
        _, status = os.waitpid(launched.pid, 0)
        launched.release()
        with os.fdopen(out_r, "rb") as out:
            assert out.read() == b"slow-path\n"
        assert not launched.forked and os.waitstatus_to_exitcode(status) == 3
    assert zygote.failures == 3
    detail = env.sandbox.info().detail
    assert "fast path unavailable" in detail and "No such file" in detail and "3 failures in a row" in detail


def test_another_thread_gets_the_slow_path(base):
    zygote = Zygote(helper_argv)
    env = make_env(base, "bubblewrap", start="launch")
    env.sandbox = LinuxSandbox("bubblewrap", env.workspace.state_dir, zygote=zygote)
    result = {}

    def run() -> None:
        launched = env.sandbox.launch_now(env.command(["/bin/true"]), layout_for(env.workspace), (0, 1, 2))
        result["forked"] = launched.forked
        result["status"] = os.waitpid(launched.pid, 0)[1]
        launched.release()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert result == {"forked": False, "status": 0}
    assert "main thread" in zygote.problem
    zygote.stop()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def test_a_killed_server_leaves_nothing_behind(base, engine):
    """A real ``codespace serve`` over stdio, killed with SIGKILL while a sandboxed command that
    ignores SIGTERM runs: the zygote dies with the server (PDEATHSIG KILL); the helper gets
    SIGTERM, forwards it, and kills what is left after the grace period."""
    marker = f"{300 + os.getpid() % 100}.{51 if engine == 'bubblewrap' else 52}"  # this run's, this engine's
    (base / "ws").mkdir()
    policy = base / "policy.toml"
    policy.write_text(f'[sandbox]\nengine = "{engine}"\n')
    env = {k: v for k, v in os.environ.items() if k != "CODESPACE_PLUGINS_BLOCK"}
    env["CODESPACE_PLUGINS_ALLOW"] = "linux_sandbox"
    server = subprocess.Popen([sys.executable, "-m", "codespace", "serve", "--workspace", str(base / "ws"),
                               "--state-dir", str(base / "state"), "--policy", str(policy)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True)

    def call(message: dict) -> dict | None:
        server.stdin.write(json.dumps(message).encode() + b"\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline()) if "id" in message else None

    try:
        call({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        call({"jsonrpc": "2.0", "method": "notifications/initialized"})
        reply = call({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "exec", "arguments": {
            "command": f"trap '' TERM; sleep {marker} & sleep {marker} & echo ready; wait", "yield_ms": 1000}}})
        result = reply["result"]["structuredContent"]
        assert result["running"] and result["sandboxed"] and "ready" in result["output"], reply
        helper = result["pid"]
        assert int(_stat(helper)[1]) == server.pid  # forked from the warm helper, a child of the server
        zygotes = [c for c in _children(server.pid) if c != helper]
        assert len(zygotes) == 1 and live_pids_in([f"sleep {marker}"])
    finally:
        server.kill()
        server.wait()
    _wait_gone([zygotes[0], helper], f"sleep {marker}")

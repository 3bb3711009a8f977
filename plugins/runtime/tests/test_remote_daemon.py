"""worker = "daemon": the server attaches to the workspace's daemon (codespace-worker start) for
files, patches and commands, says when it is gone, and reconnects once it is back; command
sessions outlive the server that started them (test_daemon_sessions.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys

import anyio
import pytest

from codespace.testing import call_error, call_ok, connect

from .test_crash import alive, serving, with_cmdline

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]


def _worker(action: str, ws, state) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codespace_runtime.cli", action, "--workspace", str(ws)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CODESPACE_STATE_DIR": str(state)})


@pytest.fixture
def daemon_ws(ws, state):
    # The policy where both find it without being told: the workspace's own file.
    (ws / ".codespace").mkdir()
    (ws / ".codespace" / "policy.toml").write_text('[runtime]\nworker = "daemon"\n')
    (ws / "a.txt").write_text("from the daemon\n")
    yield ws
    _worker("stop", ws, state)


async def test_files_and_patches_through_the_daemon_and_back_after_a_restart(daemon_ws, state):
    from codespace.testing import build_app

    started = _worker("start", daemon_ws, state)
    assert started.returncode == 0, started.stderr
    async with connect(build_app(daemon_ws, state_dir=state)) as client:
        runtime = await serving(client)
        assert runtime["worker"] == "daemon" and runtime["protocol"] == 5 and runtime["commands"] == "worker"
        daemon_pid = runtime["pid"]
        assert (await call_ok(client, "read_file", {"path": "a.txt"}))["content"] == "from the daemon\n"
        patched = await call_ok(client, "apply_patch", {
            "patch": "*** Begin Patch\n*** Update File: a.txt\n-from the daemon\n+patched\n*** End Patch"})
        assert patched["applied"] is True and (daemon_ws / "a.txt").read_text() == "patched\n"

        assert _worker("stop", daemon_ws, state).returncode == 0
        gone = await call_error(client, "read_file", {"path": "a.txt"})
        assert gone["code"] == "worker_lost" and f"the daemon worker (pid {daemon_pid})" in gone["message"]
        assert "the next call reconnects" in gone["message"]
        down = await call_error(client, "read_file", {"path": "a.txt"})
        assert "no daemon serves" in down["message"] and "codespace-worker start" in down["message"]
        assert down["details"]["dispatched"] is False

        assert _worker("start", daemon_ws, state).returncode == 0
        assert (await call_ok(client, "read_file", {"path": "a.txt"}))["content"] == "patched\n"
        again = (await call_ok(client, "workspace_info"))["runtime"]
        assert again["serving"] is True and again["pid"] != daemon_pid


def _daemon_gone(ws, state, how: str, pid: int) -> None:
    if how == "kill":
        os.kill(pid, signal.SIGKILL)
    else:
        assert _worker("stop", ws, state).returncode == 0


@pytest.mark.parametrize(("how", "sandbox"), [("kill", "auto"), ("kill", "off"), ("stop", "auto")])
async def test_a_daemon_gone_under_an_attached_server_leaves_no_operation_running(daemon_ws, state, how, sandbox):
    """The server stays attached while its daemon is killed (or stopped) with a pipe command and a
    terminal running: their operations end (interrupted, or cancelled by the clean stop) without a
    new server, no process of theirs survives, and once a daemon is back the server uses it."""
    from codespace.testing import build_app

    policy = daemon_ws / ".codespace" / "policy.toml"
    policy.write_text(policy.read_text() + f'[sandbox]\nmode = "{sandbox}"\n')
    assert _worker("start", daemon_ws, state).returncode == 0
    async with connect(build_app(daemon_ws, state_dir=state)) as client:
        daemon_pid = (await serving(client))["pid"]
        pipe = await call_ok(client, "exec", {"command": ["sleep", "291.41"], "yield_ms": 100,
                                              "operation_id": f"gone-{how}-p"})
        tty = await call_ok(client, "exec", {"command": ["bash", "--norc", "-i"], "tty": True, "yield_ms": 300,
                                             "operation_id": f"gone-{how}-t"})
        assert pipe["running"] and tty["running"]
        commands = with_cmdline(b"sleep\x00291.41\x00")
        assert commands, "the sleep should be running"
        _daemon_gone(daemon_ws, state, how, daemon_pid)
        want = {"kill": "interrupted", "stop": "cancelled"}[how]
        with anyio.fail_after(20):
            for operation_id in (f"gone-{how}-p", f"gone-{how}-t"):
                while (record := await call_ok(client, "get_operation", {"operation_id": operation_id}))["status"] == "running":
                    await anyio.sleep(0.05)
                assert record["status"] == want, record
                if how == "kill":
                    assert f"daemon worker (pid {daemon_pid})" in record["error"], record
            while any(map(alive, commands)):
                await anyio.sleep(0.05)
        assert _worker("start", daemon_ws, state).returncode == 0
        listed = await call_ok(client, "list_sessions")
        assert listed["sessions"] == []
        again = await call_ok(client, "exec", {"command": ["echo", "back"]})
        assert again["output"] == "back\n"


@pytest.mark.parametrize(("started_under", "flag", "mode"), [(0o022, None, 0o644), (0o077, None, 0o600),
                                                             (0o077, "022", 0o644), (0o022, "027", 0o640)])
async def test_the_agents_new_files_get_the_daemons_umask(daemon_ws, state, started_under, flag, mode):
    """The daemon's hardening sets umask 077 for itself; the agent's files get the umask it was
    started with, or ``start --umask``, as a write in-process gets the server's."""
    from codespace.testing import build_app

    extra = ["--umask", flag] if flag else []
    started = subprocess.run([sys.executable, "-m", "codespace_runtime.cli", "start", "--workspace", str(daemon_ws),
                              *extra], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "CODESPACE_STATE_DIR": str(state)},
                             preexec_fn=lambda: os.umask(started_under))
    assert started.returncode == 0, started.stderr
    async with connect(build_app(daemon_ws, state_dir=state)) as client:
        await serving(client)
        await call_ok(client, "write_file", {"path": "written.txt", "content": "x\n"})
        await call_ok(client, "apply_patch", {"patch": "*** Begin Patch\n*** Add File: added.txt\n+y\n*** End Patch"})
        await call_ok(client, "exec", {"command": ["sh", "-c", "echo z > by-command.txt"]})
    for name in ("written.txt", "added.txt", "by-command.txt"):
        assert (daemon_ws / name).stat().st_mode & 0o777 == mode, name


def test_a_bad_umask_is_refused_before_anything_starts(daemon_ws, state):
    refused = subprocess.run([sys.executable, "-m", "codespace_runtime.cli", "start", "--workspace", str(daemon_ws),
                              "--umask", "0x22"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "CODESPACE_STATE_DIR": str(state)})
    assert refused.returncode == 2 and "'0x22' is not an octal umask" in refused.stderr
    assert not (state / "worker" / "worker.pid").exists() or _worker("status", daemon_ws, state).returncode == 3

"""worker = "daemon": the server attaches to the workspace's daemon (codespace-worker start) for
files, patches and commands, says when it is gone, and reconnects once it is back; command
sessions outlive the server that started them (test_daemon_sessions.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import importlib.util

import pytest

from codespace.testing import call_error, call_ok, connect

from .test_crash import serving

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

"""No placeholder outlives the command that needed it, however the command ends (issue: a
command killed by timeout_ms, or a tty session open at shutdown, left 21 empty mode-0555
directories in the workspace root). bubblewrap only: the Landlock engine makes none."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import require_engine
from mcp import Client, StdioServerParameters

from codespace.testing import build_app, call_ok, connect, server_pids

pytestmark = pytest.mark.anyio
HAS_PTY = importlib.util.find_spec("codespace_pty") is not None
ORIGINAL = {".git", "sub"}


def _workspace(base: Path) -> Path:
    require_engine("bubblewrap")
    ws = base / "ws"
    for name in ORIGINAL:
        (ws / name).mkdir(parents=True, exist_ok=True)
    return ws


def _app(base: Path, plugins=("linux_sandbox",)):
    return build_app(_workspace(base), state_dir=base / "state", policy='[sandbox]\nengine = "bubblewrap"\n',
                     plugins=plugins)


def _extra(ws: Path) -> set[str]:
    return set(os.listdir(ws)) - ORIGINAL


async def _none_left(ws: Path, within: float = 1.0) -> None:
    """The host's clean-up runs as the session ends, which the tool's answer may precede by a
    moment: wait that moment, no more."""
    with anyio.move_on_after(within):
        while _extra(ws):
            await anyio.sleep(0.01)
    assert _extra(ws) == set()


async def _placeholders_while_running(client, ws: Path, **args) -> dict:
    started = await call_ok(client, "exec", {"command": ["sleep", "60"], "yield_ms": 300, **args})
    assert started["running"] and started["sandboxed"], started
    assert ".codex" in _extra(ws) and ".bashrc" in _extra(ws), _extra(ws)  # the masks need them meanwhile
    return started


async def test_timeout(base, mode):
    async with connect(_app(base), mode=mode) as client:
        ws = base / "ws"
        out = await call_ok(client, "exec", {"command": ["sleep", "60"], "timeout_ms": 400, "yield_ms": 10000})
        assert out["running"] is False and out["sandboxed"], out
        await _none_left(ws)
        fine = await call_ok(client, "exec", {"command": "echo fine"})
        assert fine["exit_code"] == 0
        await _none_left(ws)


async def test_terminate_and_kill_9_of_the_helper(base, mode):
    async with connect(_app(base), mode=mode) as client:
        ws = base / "ws"
        started = await _placeholders_while_running(client, ws)
        await call_ok(client, "terminate", {"session_id": started["session_id"], "signal": "KILL"})
        await _none_left(ws)
        started = await _placeholders_while_running(client, ws)
        os.kill(started["pid"], signal.SIGKILL)  # the helper: it removes nothing itself
        with anyio.fail_after(10):
            while (await call_ok(client, "read_output", {"session_id": started["session_id"]}))["running"]:
                await anyio.sleep(0.05)
        await _none_left(ws)


@pytest.mark.skipif(not HAS_PTY, reason="needs the pty plugin")
async def test_tty_session_open_at_shutdown(base, mode):
    ws = _workspace(base)
    async with connect(_app(base, ("linux_sandbox", "pty")), mode=mode) as client:
        await _placeholders_while_running(client, ws, tty=True)
        tty_pid = [s["pid"] for s in (await call_ok(client, "list_sessions"))["sessions"]]
        os.kill(tty_pid[0], signal.SIGKILL)  # even a tty helper killed outright
        await anyio.sleep(0.5)
        await _none_left(ws)
        await _placeholders_while_running(client, ws, tty=True)
    await _none_left(ws)  # the session was still open when the server shut down


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_kill_9_of_the_server_then_a_restart(base):
    """Server and helper both killed with SIGKILL (the server first stopped, so that neither
    can clean up): the placeholders stay until the next start removes them."""
    ws = _workspace(base)
    policy = base / "policy.toml"
    policy.write_text('[sandbox]\nengine = "bubblewrap"\n')
    # The venv's site directory by hand: under an unprivileged user the tests may run on a system
    # python3 that loads the venv's packages this way (as the suite itself then does).
    entry = (f"import site, sys; [site.addsitedir(p) for p in {[p for p in sys.path if p.endswith('-packages')]!r}]; "
             "from codespace.cli import main; sys.exit(main())")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", entry, "serve", "--workspace", str(ws), "--state-dir", str(base / "state"),
              "--policy", str(policy)],
        env={"PATH": os.environ["PATH"], "HOME": str(base), "CODESPACE_PLUGINS_BLOCK": "example"})
    async with Client(params) as client:
        started = await _placeholders_while_running(client, ws)
        (server,) = server_pids(base / "state")
        os.kill(server, signal.SIGSTOP)
        os.kill(started["pid"], signal.SIGKILL)
        os.kill(server, signal.SIGKILL)
        with anyio.fail_after(10):
            while _alive(started["pid"]):
                await anyio.sleep(0.02)
    assert ".codex" in _extra(ws)  # left behind: nobody was there to remove them
    async with Client(params) as client:
        await call_ok(client, "workspace_info")
        await _none_left(ws, within=5.0)

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


async def _cancelled(client, arguments: dict, within: float) -> None:
    with anyio.move_on_after(within):  # the client gives up: the server stops the command
        await client.call_tool("exec", arguments)


# "legacy": the client's cancel is a notification, and its next call reaches the server while
# the cancelled command is still being stopped (as Codex's does). A modern-era client waits for
# the stop before the call returns, so there is no overlap to test.

async def test_a_command_right_after_a_cancelled_one(base):
    """The next command's helper walked the workspace while the cancelled command's
    placeholders were still there, took them for real directories to bind (and so took no
    lock), and the cancelled command's clean-up removed them under it: bwrap "Can't find
    source path <ws>/.aws". A helper holds its shared lock from before that walk."""
    async with connect(_app(base), mode="legacy") as client:
        failed = []
        for _ in range(8):
            await _cancelled(client, {"command": "sleep 30", "yield_ms": 60_000}, 0.8)
            out = await call_ok(client, "exec", {"command": "true"})
            assert out["sandboxed"], out
            if out["exit_code"] != 0:
                failed.append(out["output"])
        assert failed == [], failed
        await _none_left(base / "ws", within=3.0)


async def test_a_cancelled_commands_clean_up_cannot_unmask_the_next_one(base):
    """The same race, hostile: the cancelled command ignores SIGTERM, so the next command starts
    while it still runs (its placeholders there), and the SIGKILL's clean-up comes while the next
    one runs. Removing the placeholder under it detached its mask: it created the protected name."""
    async with connect(_app(base), mode="legacy") as client:
        ws = base / "ws"
        await _cancelled(client, {"command": "trap '' TERM; sleep 30", "yield_ms": 60_000}, 0.8)
        out = await call_ok(client, "exec", {"command": "sleep 1.5; mkdir .aws && echo CREATED", "yield_ms": 20_000})
        assert out["sandboxed"] and "CREATED" not in out["output"], out
        assert not (ws / ".aws").is_dir() or not os.stat(ws / ".aws").st_mode & 0o200, "a real .aws was made"
        await _none_left(ws, within=3.0)


async def test_a_timeout_kill_cannot_unmask_a_command_that_started_after_it(base, mode):
    """A command started while another's placeholders were there, then its timeout_ms killed
    that other (cgroup.kill: no helper left to clean up; the server sweeps)."""
    async with connect(_app(base), mode=mode) as client:
        ws = base / "ws"
        first = await call_ok(client, "exec", {"command": "sleep 30", "timeout_ms": 1000, "yield_ms": 200})
        assert first["running"] and ".aws" in _extra(ws), first
        out = await call_ok(client, "exec", {"command": "sleep 2; mkdir .aws && echo CREATED", "yield_ms": 20_000})
        assert out["sandboxed"] and "CREATED" not in out["output"], out
        ended = await call_ok(client, "read_output", {"session_id": first["session_id"]})
        assert ended["running"] is False and ended["timed_out"], ended
        await _none_left(ws, within=3.0)


async def test_commands_ending_while_others_start(base, mode):
    """Two streams of short sandboxed commands: one's end (its helper's and the server's
    clean-up) keeps overlapping the other's start."""
    async with connect(_app(base), mode=mode) as client:
        ws = base / "ws"
        failures: list[dict] = []

        async def stream(command: str) -> None:
            for _ in range(25):
                out = await call_ok(client, "exec", {"command": command})
                if out["exit_code"] != 0:
                    failures.append(out)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream, "true")
            tg.start_soon(stream, "test ! -w .codex")
        assert failures == [], [f.get("output") for f in failures[:3]]
        await _none_left(ws, within=3.0)

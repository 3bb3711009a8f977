"""Sessions the server kills with SIGKILL, through a real MCP server in-process: what the
command's output and exit say when the sandbox's processes die before its helper.

A fast-path helper is a keeper: the server's SIGKILL (a timeout, ``terminate`` with KILL) kills
its descendants first and its group after, so the helper may see bwrap or the command die of
SIGKILL. It used to answer with "codespace-linux-sandbox: the warm helper's child failed:
[Errno 22] Invalid argument" at the end of the output (it asked sigaction to reset SIGKILL); a
daemon worker's long loop showed it on every timeout."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from codespace.testing import call_ok, connect

pytestmark = pytest.mark.anyio
HAS_PTY = importlib.util.find_spec("codespace_pty") is not None
HELPER_SAYS = "codespace-linux-sandbox:"
LOOP = "i=0; while :; do echo line-$i; i=$((i+1)); sleep 0.02; done"


@pytest.fixture
def app(make_app, ws: Path, engine: str):
    (ws / "sub").mkdir(exist_ok=True)
    return make_app(f'[sandbox]\nengine = "{engine}"\n',
                    plugins=("linux_sandbox", "pty") if HAS_PTY else ("linux_sandbox",))


async def test_a_timed_out_loop_next_to_a_terminal_ends_without_a_helper_failure(app, engine, mode):
    async with connect(app, mode=mode) as client:
        shell = None
        if HAS_PTY:  # the sandboxed terminal of the daemon test, a per-command helper, alongside
            shell = await call_ok(client, "exec", {"command": ["bash", "--norc", "--noprofile", "-i"], "tty": True,
                                                   "yield_ms": 300})
            assert shell["running"] is True and shell["sandboxed"] is True, shell
        for round_ in range(6):
            out = await call_ok(client, "exec", {"command": LOOP, "timeout_ms": 400 + 60 * round_, "yield_ms": 10_000})
            assert out["sandboxed"] is True and out["timed_out"] is True and out["exit_code"] == 124, out
            assert "line-3\n" in out["output"], out["output"][-300:]
            assert HELPER_SAYS not in out["output"], out["output"][-300:]
        if shell is not None:
            typed = await call_ok(client, "write_stdin", {"session_id": shell["session_id"],
                                                          "chars": "echo still-$((40+2))\n", "yield_ms": 2000})
            assert "still-42" in typed["output"], typed
            await call_ok(client, "terminate", {"session_id": shell["session_id"], "signal": "KILL", "grace_ms": 100})


async def test_a_loop_terminated_with_kill_ends_without_a_helper_failure(app, engine, mode):
    async with connect(app, mode=mode) as client:
        for _ in range(6):
            started = await call_ok(client, "exec", {"command": LOOP, "yield_ms": 300})
            assert started["running"] is True, started
            ended = await call_ok(client, "terminate", {"session_id": started["session_id"], "signal": "KILL",
                                                         "grace_ms": 100})
            assert ended["running"] is False and ended["exit_code"] == 137, ended
            assert HELPER_SAYS not in ended["output"], ended["output"][-300:]

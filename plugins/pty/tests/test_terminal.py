"""Real pseudo-terminals driven through real MCP sessions."""

from __future__ import annotations

import os
import re
import sys
import time

import anyio
import pytest

from codespace.processes.kill import members
from codespace.testing import call_error, call_ok

pytestmark = pytest.mark.anyio

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[>=]|\r")


def plain(text: str) -> str:
    return ANSI.sub("", text)


async def until(client, session: str, predicate, *, chars: str = "", timeout: float = 10.0, seen: str = "") -> str:
    """Send ``chars`` once, then collect output (after ``seen``) until ``predicate(collected)``."""
    collected = seen
    deadline = time.monotonic() + timeout
    step = await call_ok(client, "write_stdin", {"session_id": session, "chars": chars, "yield_ms": 1000})
    collected += step["output"]
    while not predicate(plain(collected)):
        assert time.monotonic() < deadline, f"timed out; got {collected!r}"
        step = await call_ok(client, "read_output", {"session_id": session, "wait_ms": 500})
        collected += step["output"]
    return plain(collected)


async def finish(client, session: str, step: dict) -> dict:
    """Follow a session until it has exited and its output is delivered."""
    while step["running"] or step["session_id"]:
        step = await call_ok(client, "read_output", {"session_id": session, "wait_ms": 1000})
    return step


async def test_interactive_bash_stty_resize_and_ctrl_c(mcp_client, mode):
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": ["bash", "--norc", "--noprofile", "-i"], "tty": True,
                                                 "env": {"PS1": "PROMPT> "}})
        session = started["session_id"]
        assert started["tty"] is True and started["running"] is True
        assert os.getpgid(started["pid"]) == started["pid"] == os.getsid(started["pid"])  # session leader
        await until(client, session, lambda t: "PROMPT> " in t, seen=started["output"])
        out = await until(client, session, lambda t: re.search(r"^24 80$", t, re.M) is not None, chars="stty size\n")
        assert "24 80" in out
        await call_ok(client, "resize", {"session_id": session, "rows": 40, "cols": 132})
        out = await until(client, session, lambda t: "40 132" in t, chars="stty size\n")
        assert "40 132" in out
        start = time.monotonic()
        await call_ok(client, "write_stdin", {"session_id": session, "chars": "sleep 30; echo never\n", "yield_ms": 300})
        out = await until(client, session, lambda t: "PROMPT> " in t.split("^C")[-1], chars="\x03")
        assert "never" not in out and time.monotonic() - start < 10
        done = await call_ok(client, "write_stdin", {"session_id": session, "chars": "exit 7\n", "yield_ms": 5000})
        assert (await finish(client, session, done))["exit_code"] == 7


async def test_python_repl(mcp_client, mode):
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": [sys.executable, "-q", "-i"], "tty": True})
        session = started["session_id"]
        await until(client, session, lambda t: ">>> " in t, seen=started["output"])
        out = await until(client, session, lambda t: "42" in t, chars="6 * 7\n")
        assert "42" in out
        out = await until(client, session, lambda t: "KeyboardInterrupt" in t,
                          chars="import time\ntime.sleep(30)\n\x03")
        assert "KeyboardInterrupt" in out
        eof = await call_ok(client, "write_stdin", {"session_id": session, "chars": "\x04", "yield_ms": 3000})
        final = await finish(client, session, eof)
        assert final["running"] is False and final["exit_code"] == 0


async def test_full_screen_programs(mcp_client, mode):
    async with mcp_client(mode=mode) as client:
        top = await call_ok(client, "exec", {"command": ["top", "-b", "-n", "1"], "tty": True, "yield_ms": 10000})
        assert top["exit_code"] == 0 and "PID" in top["output"] and "load average" in top["output"]
        less = await call_ok(client, "exec", {"command": "seq 1 500 | less", "tty": True, "rows": 10})
        screen = plain(less["output"])
        assert "1\n" in screen and "9\n" in screen and "500" not in screen  # one screenful
        assert less["running"] is True
        quit_ = await call_ok(client, "write_stdin", {"session_id": less["session_id"], "chars": "q", "yield_ms": 3000})
        assert (await finish(client, less["session_id"], quit_))["exit_code"] == 0


async def test_terminate_and_timeout_leave_nothing_behind(mcp_client, mode):
    script = "trap '' TERM HUP; (trap '' TERM HUP; sleep 1000) & (trap '' TERM HUP; sleep 1000) & wait"
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": script, "tty": True, "yield_ms": 300})
        leader = started["pid"]
        assert len(members(leader)) >= 3
        stopped = await call_ok(client, "terminate", {"session_id": started["session_id"], "grace_ms": 300})
        assert stopped["running"] is False
        assert members(leader) == []
        timed = await call_ok(client, "exec", {"command": script, "tty": True, "timeout_ms": 500, "yield_ms": 5000})
        assert timed["timed_out"] is True and timed["exit_code"] == 124
        assert members(timed["pid"]) == []


async def test_output_on_a_terminal_keeps_utf8_and_control_bytes(mcp_client, mode):
    async with mcp_client(mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "printf 'héllo \\033[1mbold\\033[0m €\\n'", "tty": True,
                                             "yield_ms": 5000})
        assert "héllo" in out["output"] and "\x1b[1mbold" in out["output"] and "€" in out["output"]


async def test_no_terminal_backend_gives_a_clear_error(mcp_client, mode):
    async with mcp_client(plugins=(), mode=mode) as client:
        error = await call_error(client, "exec", {"command": ["true"], "tty": True})
        assert error["code"] == "backend_missing" and "codespace-pty" in error["message"]


async def test_sessions_survive_many_writes_in_order(mcp_client, mode):
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": ["cat"], "tty": True})
        session = started["session_id"]
        seen = started["output"]
        for i in range(20):
            step = await call_ok(client, "write_stdin", {"session_id": session, "chars": f"line{i:02d}\n", "yield_ms": 0})
            seen += step["output"]
        out = await until(client, session, lambda t: t.count("line19") >= 2, seen=seen)
        lines = [line for line in out.splitlines() if line.startswith("line")]
        # The terminal's echo of a later write may overtake cat's copy of an
        # earlier one, so the two streams interleave freely; what must hold is
        # that each stream is complete and in order: first sightings are the
        # echoes, second sightings are cat's output.
        expected = [f"line{i:02d}" for i in range(20)]
        first, second = [], []
        for line in lines:
            (second if line in first else first).append(line)
        assert first == expected and second == expected
        await call_ok(client, "terminate", {"session_id": session, "signal": "KILL"})


async def test_a_write_the_terminal_does_not_take_returns_at_yield(mcp_client, mode):
    """Found by testing: 3 MB written to a raw terminal whose command never reads hung the call,
    and the server's shutdown after it."""
    big = "x" * (3 * 1024 * 1024)
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": "stty raw -echo; echo ready; exec sleep 60", "tty": True,
                                                 "yield_ms": 1000})
        assert "ready" in started["output"], started
        before = time.monotonic()
        wrote = await call_ok(client, "write_stdin", {"session_id": started["session_id"], "chars": big, "yield_ms": 300})
        assert time.monotonic() - before < 5 and wrote["input_pending_bytes"] > 0, wrote
        await call_ok(client, "write_stdin", {"session_id": started["session_id"], "chars": big, "yield_ms": 0})
        leaving = time.monotonic()
    assert time.monotonic() - leaving < 10


@pytest.mark.parametrize("cwd", ["missing-dir", "a-fifo", "a-file"])
async def test_a_working_directory_that_cannot_be_entered_is_a_clear_error(mcp_client, ws, mode, cwd):
    """Found by testing: ptyprocess's chdir raised in the forked copy of the server, which ran the
    server's own code on; the agent got a server traceback as the command's output, exit 2."""
    os.mkfifo(ws / "a-fifo")
    (ws / "a-file").write_text("x")
    async with mcp_client(mode=mode) as client:
        error = await call_error(client, "exec", {"command": ["pwd"], "tty": True, "cwd": cwd})
        assert error["code"] != "internal_error" and f"cannot run in {ws / cwd}" in error["message"], error
        assert "Traceback" not in error["message"]
        fine = await call_ok(client, "exec", {"command": ["pwd"], "tty": True, "yield_ms": 5000})
        assert plain(fine["output"]).strip() == str(ws), fine


async def test_resize_after_the_command_ended(mcp_client, mode):
    """Found by testing: resize on an exited terminal answered internal_error (EBADF), then
    called ioctl on whatever descriptor had its number by then."""
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": "sleep 0.3; echo bye", "tty": True, "yield_ms": 0})
        session = started["session_id"]
        with anyio.fail_after(10):  # ended, its output not yet read: the session is still there
            while (await call_ok(client, "list_sessions"))["sessions"][0]["running"]:
                await anyio.sleep(0.05)
        error = await call_error(client, "resize", {"session_id": session, "rows": 30, "cols": 100})
        assert error["code"] == "exited" and "has exited" in error["message"], error


async def test_close_stdin_on_a_terminal_says_to_send_ctrl_d(mcp_client, mode):
    """A terminal has no stdin of its own to close: write_stdin's close_stdin is refused, naming
    what to send instead, and the session goes on."""
    async with mcp_client(mode=mode) as client:
        started = await call_ok(client, "exec", {"command": "cat", "tty": True, "yield_ms": 100})
        refused = await call_error(client, "write_stdin", {"session_id": started["session_id"], "close_stdin": True})
        done = await call_ok(client, "write_stdin", {"session_id": started["session_id"], "chars": "\x04",
                                                      "yield_ms": 5000})
        final = await finish(client, started["session_id"], done)
    assert refused["code"] == "invalid_argument" and "\\x04" in refused["message"], refused
    assert final["running"] is False and final["exit_code"] == 0

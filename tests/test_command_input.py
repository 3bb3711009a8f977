"""Input a command does not read never holds a call, the server or its shutdown (found by
testing from outside: a 3 MB write_stdin to `sleep` never returned and kept the server alive
after its client left; exec with 1 MB of stdin for `head -c 10` was answered `stdin_closed`,
and recorded failed, though the command succeeded)."""

from __future__ import annotations

import hashlib
import time

import anyio
import pytest

from codespace.processes.session import MAX_PENDING_INPUT
from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio
BIG = "x" * (3 * 1024 * 1024)


async def check_unread_writes(make_app, mode, tty: bool) -> None:
    """Shared with codespace-pty's tests, which run it on a terminal."""
    # Raw mode: the terminal does not answer for the command by echoing what it is sent.
    command = "stty raw -echo; echo ready; exec sleep 60" if tty else "echo ready; exec sleep 60"
    started = time.monotonic()
    async with connect(make_app(), mode=mode) as client:
        session = await call_ok(client, "exec", {"command": command, "tty": tty, "interactive": True, "yield_ms": 1000})
        assert session["running"] and "ready" in session["output"], session
        sid = session["session_id"]
        before = time.monotonic()
        wrote = await call_ok(client, "write_stdin", {"session_id": sid, "chars": BIG, "yield_ms": 300})
        assert time.monotonic() - before < 5
        assert wrote["running"] and 0 < wrote["input_pending_bytes"] <= len(BIG), wrote
        assert "waiting for the command to read them" in wrote["note"]
        again = await call_ok(client, "write_stdin", {"session_id": sid, "chars": "more", "yield_ms": 100})
        assert again["input_pending_bytes"] == wrote["input_pending_bytes"] + 4
        await call_ok(client, "write_stdin", {"session_id": sid, "chars": BIG, "yield_ms": 0})
        too_much = await call_error(client, "write_stdin", {"session_id": sid, "chars": BIG})
        assert too_much["code"] == "input_backlog" and "terminate" in too_much["message"], too_much
        stopped = await call_ok(client, "terminate", {"session_id": sid})
        assert not stopped["running"] and stopped["input_pending_bytes"] == 0
        assert "left" in stopped["note"], stopped
        # The client leaves with a write pending in another session: the server stops at once.
        other = await call_ok(client, "exec", {"command": "exec sleep 60", "tty": tty, "interactive": True,
                                               "yield_ms": 100})
        await call_ok(client, "write_stdin", {"session_id": other["session_id"], "chars": BIG, "yield_ms": 0})
        leaving = time.monotonic()
    assert time.monotonic() - leaving < 10
    assert time.monotonic() - started < 30


async def test_a_write_the_command_does_not_read_returns_at_yield(make_app, mode):
    await check_unread_writes(make_app, mode, tty=False)


async def test_stdin_the_command_leaves_is_not_a_failure(make_app, mode):
    async with connect(make_app(f"[limits]\nmax_argument_bytes = {2 * MAX_PENDING_INPUT}\n"), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "head -c 10 >/dev/null; echo took-ten", "stdin": "y" * 1_000_000,
                                             "operation_id": "op-head"})
        assert out["exit_code"] == 0 and out["output"] == "took-ten\n", out
        assert out["input_pending_bytes"] == 0 and "left" in out["note"], out
        record = await call_ok(client, "get_operation", {"operation_id": "op-head"})
        assert record["status"] == "succeeded", record
        quick = time.monotonic()
        slow = await call_ok(client, "exec", {"command": "exec sleep 3", "stdin": "y" * 1_000_000, "yield_ms": 300})
        assert time.monotonic() - quick < 2.5 and slow["running"], slow  # yield_ms holds, stdin or not
        await call_ok(client, "terminate", {"session_id": slow["session_id"]})
        whole = await call_ok(client, "exec", {"command": "wc -c", "stdin": "z" * 300_000})
        assert whole["output"].strip() == "300000" and "input" not in (whole["note"] or ""), whole
        refused = await call_error(client, "exec", {"command": "cat", "stdin": "z" * (MAX_PENDING_INPUT + 1)})
        assert refused["code"] == "invalid_arguments" and "nothing was started" in refused["message"]
        listed = await call_ok(client, "list_sessions")
        assert listed["sessions"] == [] or all(not s["running"] for s in listed["sessions"]), listed


async def test_writes_arrive_whole_and_in_order(make_app, mode):
    """Queued writes keep their order across calls, while the command is slow to read."""
    parts = [f"{i:06d}" * 50_000 for i in range(5)]
    data = "".join(parts).encode()
    async with connect(make_app(), mode=mode) as client:
        session = await call_ok(client, "exec", {"command": f"sleep 0.5; head -c {len(data)} | sha256sum",
                                                 "interactive": True, "yield_ms": 0})
        for part in parts:
            await call_ok(client, "write_stdin", {"session_id": session["session_id"], "chars": part, "yield_ms": 0})
        output = ""
        with anyio.fail_after(20):
            while True:
                out = await call_ok(client, "read_output", {"session_id": session["session_id"], "wait_ms": 500})
                output += out["output"]
                if not out["running"]:
                    break
    assert output.split()[0] == hashlib.sha256(data).hexdigest(), output


async def test_stdin_and_writes_in_order_through_a_reader(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        text = "".join(f"line {i}\n" for i in range(40_000))
        out = await call_ok(client, "exec", {"command": "sleep 0.3; sha256sum", "stdin": text, "yield_ms": 20_000})
    assert out["exit_code"] == 0 and out["output"].split()[0] == hashlib.sha256(text.encode()).hexdigest(), out

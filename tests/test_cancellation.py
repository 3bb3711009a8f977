"""Cancellation of exec: the client gives up on the call (notifications/cancelled) before it
returns. The command is stopped, the record says ``cancelled`` and why, and a retry with the
same operation_id replays that instead of starting the command again or finding it running."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest

from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio

MARK = "1234.5678"  # sleep's argument marks the command in /proc


def _running_marked() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1][0]
        except OSError:
            continue
        if b"sleep" in cmdline[0] and MARK.encode() in cmdline and state != "Z":
            pids.append(int(entry))
    return pids


async def _start_and_cancel(client, ws: Path, arguments: dict) -> None:
    started = ws / "started"
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "exec", arguments)
        with anyio.fail_after(10):
            while not started.exists() or not _running_marked():
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


async def test_cancelled_exec_stops_the_command_and_the_retry_says_so(make_app, ws, mode):
    arguments = {"command": f"touch started; trap '' TERM; sleep {MARK}", "yield_ms": 60_000, "operation_id": "cx-1"}
    async with connect(make_app(), mode=mode) as client:
        await _start_and_cancel(client, ws, arguments)
        deadline = time.monotonic() + 5
        while _running_marked() and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert _running_marked() == [], "the cancelled command runs on"

        # The record is finished right after the stop (the gateway writes it as the call's
        # cancellation leaves the handler): a read in between, on a loaded machine, sees running.
        record = await call_ok(client, "get_operation", {"operation_id": "cx-1"})
        while record["status"] == "running" and time.monotonic() < deadline + 5:
            await anyio.sleep(0.02)
            record = await call_ok(client, "get_operation", {"operation_id": "cx-1"})
        assert record["status"] == "cancelled"
        assert "the command was stopped" in record["error"] and "SIGKILL" in record["error"]

        (ws / "started").unlink()
        replay = await call_error(client, "exec", arguments)
        assert replay["code"] == "cancelled" and replay["replayed"] is True
        assert "new operation_id" in replay["message"] and "status cancelled" in replay["message"]
        await anyio.sleep(0.2)
        assert not (ws / "started").exists() and _running_marked() == [], "the retry ran the command again"
        sessions = await call_ok(client, "list_sessions")
        assert [s for s in sessions["sessions"] if s["operation_id"] == "cx-1"] == []

        fresh = await call_ok(client, "exec", {**arguments, "command": "echo again", "operation_id": "cx-2"})
        assert fresh["output"] == "again\n"


async def test_an_exec_that_returned_a_session_is_not_touched_by_a_late_cancel(make_app, ws, mode):
    arguments = {"command": f"touch started; exec sleep {MARK}", "yield_ms": 100, "operation_id": "cx-3"}
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", arguments)
        assert out["running"] is True
        replay = await call_ok(client, "exec", arguments)
        assert replay["replayed"] is True and replay["session_id"] == out["session_id"]
        assert _running_marked()
        await call_ok(client, "terminate", {"session_id": out["session_id"], "signal": "KILL", "grace_ms": 0})


async def test_a_dropped_http_connection_is_not_a_cancellation(ws, state):
    """The client's connection goes away mid-call without notifications/cancelled: the command runs
    on, and a retry with the same operation_id waits for the call and gets its session."""
    import httpx2

    from .test_transports import HEADERS, INIT, http_server

    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "exec", "arguments": {
        "command": f"touch started; exec sleep {MARK}", "yield_ms": 3000, "operation_id": "cx-drop"}}}
    with http_server(ws, state) as (url, _):
        headers = {**HEADERS, "Authorization": f"Bearer {(state / 'http-token').read_text().strip()}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            init = await http.post(url, json=INIT, headers=headers)
            headers |= {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        async with httpx2.AsyncClient(timeout=0.5) as dropping:
            with pytest.raises(httpx2.TimeoutException):
                await dropping.post(url, json=call, headers=headers)
        assert (ws / "started").exists() and _running_marked(), "the command did not run on"
        async with httpx2.AsyncClient(timeout=30) as http:
            retry = await http.post(url, json={**call, "id": 3}, headers=headers)
            data = next(json.loads(line[5:]) for line in retry.text.splitlines() if line.startswith("data:"))
        result = data["result"]["structuredContent"]
        assert result["replayed"] is True and result["running"] is True and result["session_id"]
        assert _running_marked()
    deadline = time.monotonic() + 5
    while _running_marked() and time.monotonic() < deadline:
        await anyio.sleep(0.05)  # the server's shutdown ends its sessions
    assert _running_marked() == []

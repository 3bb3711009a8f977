"""kill -9 the server mid-operation; the next start reports it interrupted and reaps its processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import anyio
import pytest
from mcp import Client

from codespace.testing import call_error, call_ok, server_pids

from .conftest import codespace_cmd, subprocess_env
from .test_transports import stdio_params

pytestmark = pytest.mark.anyio


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


async def _kill_server_during(ws, state, tool: str, args: dict, ready) -> None:
    async with Client(stdio_params(ws, state)) as client:
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                try:
                    await client.call_tool(tool, args)
                except Exception:  # the connection dies with the server
                    pass

            tg.start_soon(call)
            with anyio.fail_after(20):
                while not ready():
                    await anyio.sleep(0.02)
            (pid,) = server_pids(state)
            os.kill(pid, signal.SIGKILL)
            tg.cancel_scope.cancel()


def _ops_show(ws, state, operation_id: str) -> dict:
    out = subprocess.run(
        [*codespace_cmd(), "ops", "show", operation_id, "--workspace", str(ws), "--state-dir", str(state)],
        capture_output=True, text=True, check=True, env=subprocess_env(), timeout=60,
    )
    return json.loads(out.stdout)


async def test_kill_9_mid_operation_then_restart_reports_interrupted(ws, state):
    marker = ws / ".tally" / "slow"
    ready = lambda: state.joinpath("operations.sqlite3").exists() and _running(ws, state, "crash-1")  # noqa: E731
    await _kill_server_during(ws, state, "tally", {"name": "slow", "sleep_ms": 30000, "operation_id": "crash-1"}, ready)
    assert not marker.exists()  # the side effect never happened
    shown = _ops_show(ws, state, "crash-1")
    assert shown["status"].startswith("running (its server is gone")

    async with Client(stdio_params(ws, state)) as client:
        record = await call_ok(client, "get_operation", {"operation_id": "crash-1"})
        assert record["status"] == "interrupted"
        assert "stopped before it finished" in record["error"]
        retry = await call_error(client, "tally", {"name": "slow", "sleep_ms": 30000, "operation_id": "crash-1"})
        assert "interrupted" in retry["message"] and "new operation_id" in retry["message"]
    assert not marker.exists()  # the retry with the same key did not run it


def _running(ws, state, operation_id: str) -> bool:
    try:
        return _ops_show(ws, state, operation_id)["status"].startswith("running")
    except subprocess.CalledProcessError:
        return False


async def test_restart_reaps_process_groups_left_behind(ws, state):
    pid_file = ws / "orphan.pid"
    await _kill_server_during(ws, state, "spawn_orphan", {"operation_id": "orphan-1"}, pid_file.exists)
    orphan = int(pid_file.read_text())
    time.sleep(0.2)
    assert _alive(orphan), "the orphan should outlive the killed server"
    try:
        async with Client(stdio_params(ws, state)) as client:
            record = await call_ok(client, "get_operation", {"operation_id": "orphan-1"})
            assert record["status"] == "interrupted"
            with anyio.fail_after(5):
                while _alive(orphan):
                    await anyio.sleep(0.02)
    finally:
        if _alive(orphan):
            os.kill(orphan, signal.SIGKILL)


async def test_restart_reaps_live_command_sessions(ws, state):
    """A server killed with sessions running: its child dies with it (parent-death
    signal). Where a cgroup holds the command, grandchildren ignoring SIGTERM outlive the
    server and are reaped at the next start; where a keeper holds it (no cgroup can be made,
    as for most unprivileged users), the keeper kills them when the server dies."""
    script = "trap '' TERM; (trap '' TERM; exec -a cs-orphan sleep 1000) & echo $! > grandchild; sleep 1000"
    async with Client(stdio_params(ws, state)) as client:
        tracking = (await call_ok(client, "workspace_info"))["sandbox"]["process_tracking"]["mechanism"]
        started = await call_ok(client, "exec", {"command": script, "yield_ms": 300, "operation_id": "live-1"})
        assert started["running"]
        (pid,) = server_pids(state)
        os.kill(pid, signal.SIGKILL)
    grandchild = int((ws / "grandchild").read_text())
    if tracking == "subreaper":
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(grandchild), "the keeper should kill the command's processes when the server dies"
    else:
        time.sleep(0.3)
        assert _alive(grandchild), "the grandchild should survive the killed server until the restart"
    try:
        async with Client(stdio_params(ws, state)) as client:
            record = await call_ok(client, "get_operation", {"operation_id": "live-1"})
            assert record["status"] == "interrupted"
            with anyio.fail_after(5):
                while _alive(grandchild) or _alive(started["pid"]):
                    await anyio.sleep(0.02)
    finally:
        for leftover in (grandchild, started["pid"]):
            if _alive(leftover):
                os.kill(leftover, signal.SIGKILL)

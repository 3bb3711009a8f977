"""Operation identity through real MCP sessions: replay, conflict, concurrent duplicates."""

from __future__ import annotations

import subprocess
import sys
import time

import anyio
import pytest

from codespace.procfs import stat_fields
from codespace.store import owner_alive, owner_token
from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio


def _count(ws, name: str) -> int:
    path = ws / ".tally" / name
    return len(path.read_text().splitlines()) if path.exists() else 0


async def test_same_key_same_arguments_replays_without_running(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        first = await call_ok(client, "tally", {"name": "a", "operation_id": "key-1"})
        second = await call_ok(client, "tally", {"name": "a", "operation_id": "key-1"})
    assert first["count"] == 1 and first["replayed"] is False
    assert second == {**first, "replayed": True}
    assert _count(ws, "a") == 1


async def test_no_key_runs_every_time_with_fresh_ids(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        a = await call_ok(client, "tally", {"name": "b"})
        b = await call_ok(client, "tally", {"name": "b"})
    assert a["operation_id"] != b["operation_id"]
    assert _count(ws, "b") == 2


async def test_same_key_different_arguments_is_a_conflict(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "tally", {"name": "c", "operation_id": "key-2"})
        error = await call_error(client, "tally", {"name": "other", "operation_id": "key-2"})
    assert error["code"] == "operation_conflict"
    assert "key-2" in error["message"] and "different call" in error["message"]
    assert _count(ws, "other") == 0


async def test_defaults_do_not_change_identity(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "tally", {"name": "d", "operation_id": "key-3"})
        again = await call_ok(client, "tally", {"name": "d", "sleep_ms": 0, "operation_id": "key-3"})
    assert again["replayed"] is True
    assert _count(ws, "d") == 1


async def test_concurrent_duplicates_execute_once(make_app, ws, mode):
    results = []
    async with connect(make_app(), mode=mode) as client:

        async def one() -> None:
            results.append(await call_ok(client, "tally", {"name": "e", "sleep_ms": 200, "operation_id": "key-4"}))

        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(one)
    assert _count(ws, "e") == 1
    assert len(results) == 12
    assert sum(not r["replayed"] for r in results) == 1
    assert {r["count"] for r in results} == {1}


async def test_concurrent_distinct_keys_all_execute(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(call_ok, client, "tally", {"name": "f", "sleep_ms": 50, "operation_id": f"k{i}"})
    assert _count(ws, "f") == 8


async def test_replayed_failure_keeps_its_error(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        first = await call_error(client, "tally", {"name": "BAD NAME", "operation_id": "key-5"})
        assert first["code"] == "invalid_arguments"  # never became an operation
        refused = await call_error(client, "write_file", {"path": ".git/x", "content": "", "operation_id": "key-6"})
        again = await call_error(client, "write_file", {"path": ".git/x", "content": "", "operation_id": "key-6"})
    assert refused["rule"] == "filesystem.protected"
    assert "replayed" in again["message"] and "filesystem.protected" in again["message"]


async def test_records_are_visible_through_get_operation(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        done = await call_ok(client, "tally", {"name": "g", "operation_id": "key-7"})
        record = await call_ok(client, "get_operation", {"operation_id": "key-7"})
        listing = await call_ok(client, "list_operations", {"tool": "tally"})
        missing = await call_error(client, "get_operation", {"operation_id": "nope"})
    assert record["status"] == "succeeded" and record["tool"] == "tally"
    assert record["result"]["count"] == done["count"]
    assert record["client"].startswith("memory")
    assert [o["operation_id"] for o in listing["operations"]] == ["key-7"]
    assert missing["code"] == "not_found"


def _zombie_token() -> tuple[subprocess.Popen, str]:
    """The owner token of a process that has exited and is not reaped yet (a zombie)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    token = owner_token(child.pid)
    deadline = time.monotonic() + 10
    while stat_fields(child.pid)[0] != b"Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child, token


def test_an_unreaped_server_is_not_alive():
    """Found by testing from outside: a server killed by SIGKILL whose parent had not reaped it
    yet still had a /proc entry with its start time, so its operations stayed running."""
    child, token = _zombie_token()
    try:
        assert not owner_alive(token)
    finally:
        child.wait()


async def test_a_retry_of_an_operation_whose_server_died_answers_at_once(make_app, ws, mode):
    """Found by testing from outside: a retry of an operation still marked running by a server
    that had died (found so after the start that would have marked it interrupted) waited 30 s
    and said it was "still running in another server", until the next restart. It is answered
    at once as interrupted, and the record says so."""
    child, token = _zombie_token()
    app = make_app()
    async with connect(app, mode=mode) as client:
        await call_ok(client, "tally", {"name": "z", "operation_id": "orphan"})
        await app.store._run(lambda: app.store._db().execute(
            "UPDATE operations SET status = 'running', owner = ?, result = NULL, finished_at = NULL "
            "WHERE operation_id = 'orphan'", (token,)))
        started = time.monotonic()
        retry = await call_error(client, "tally", {"name": "z", "operation_id": "orphan"})
        waited = time.monotonic() - started
        record = await call_ok(client, "get_operation", {"operation_id": "orphan"})
    child.wait()
    assert waited < 5, waited
    assert retry["code"] == "interrupted" and "was interrupted" in retry["message"], retry
    assert record["status"] == "interrupted", record
    assert _count(ws, "z") == 1

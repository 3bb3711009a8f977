"""The SQLite operation store on real files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import anyio
import pytest

from codespace.store import OperationRecord, SQLiteStore, StoreError, owner_alive, owner_token
from codespace.store import sqlite as sqlite_store

pytestmark = pytest.mark.anyio


async def _store(tmp_path, **kwargs) -> SQLiteStore:
    return await SQLiteStore(tmp_path / "ops.sqlite3", **kwargs).open()


async def test_begin_new_existing_conflict(tmp_path):
    store = await _store(tmp_path)
    first = await store.begin("k", "tool", "h1", "{}", "c")
    assert first.outcome == "new" and first.record.status == "running"
    again = await store.begin("k", "tool", "h1", "{}", "c")
    assert again.outcome == "existing" and again.record.status == "running"
    await store.finish("k", "succeeded", result={"x": 1})
    done = await store.begin("k", "tool", "h1", "{}", "c")
    assert done.outcome == "existing" and done.record.result == {"x": 1} and done.record.finished_at
    assert (await store.begin("k", "tool", "h2", "{}", "c")).outcome == "conflict"
    await store.close()


async def test_store_file_is_private_and_in_wal_mode(tmp_path):
    store = await _store(tmp_path)
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert store.journal_mode_sync() == "wal"
    await store.close()


async def test_records_survive_reopen(tmp_path):
    store = await _store(tmp_path)
    await store.begin("k", "tool", "h", None, None)
    await store.finish("k", "failed", error="nope")
    await store.close()
    reopened = await _store(tmp_path)
    record = await reopened.get("k")
    assert record.status == "failed" and record.error == "nope"
    await reopened.close()


async def test_recover_marks_only_dead_owners(tmp_path):
    store = await _store(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live_other = owner_token(child.pid)
        now = time.time()
        for op, owner in (("dead", f"{child.pid + 100000}:1:boot"), ("live", live_other), ("mine", store.owner)):
            await store.insert_finished(OperationRecord(
                operation_id=op, tool="t", args_hash="h", status="running", owner=owner, created_at=now,
            ))
        await store._run(lambda: store._db().execute("UPDATE operations SET finished_at = NULL"))
        recovered = await store.recover()
        assert [r.operation_id for r in recovered] == ["dead"]
        assert (await store.get("dead")).status == "interrupted"
        assert (await store.get("live")).status == "running"
        assert (await store.get("mine")).status == "running"
    finally:
        child.kill()
        child.wait()
    assert not owner_alive(live_other)
    await store.close()


async def test_retention_by_count_and_age(tmp_path):
    store = await _store(tmp_path, max_records=10, max_age_days=1)
    old = time.time() - 3 * 86400
    for i in range(30):
        await store.insert_finished(OperationRecord(
            operation_id=f"op{i}", tool="t", args_hash="h", status="succeeded",
            created_at=(old if i < 5 else time.time() + i),
        ))
    await store.begin("running-one", "t", "h", None, None)
    await store.prune()
    kept = await store.list(limit=100)
    ids = {r.operation_id for r in kept}
    assert "running-one" in ids
    assert not {f"op{i}" for i in range(5)} & ids
    assert len(ids - {"running-one"}) <= 10
    assert {f"op{i}" for i in range(20, 30)} <= ids
    await store.close()


async def test_prune_runs_automatically(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "PRUNE_EVERY", 5)
    store = await _store(tmp_path, max_records=10)
    for i in range(40):
        await store.begin(f"k{i}", "t", "h", None, None)
        await store.finish(f"k{i}", "succeeded")
    assert len(await store.list(limit=100)) <= 15
    await store.close()


async def test_list_filters_and_pages(tmp_path):
    store = await _store(tmp_path)
    for i in range(6):
        await store.insert_finished(OperationRecord(
            operation_id=f"op{i}", tool="a" if i % 2 else "b", args_hash="h",
            status="refused" if i < 3 else "succeeded", created_at=1000.0 + i,
        ))
    assert [r.operation_id for r in await store.list(tool="a")] == ["op5", "op3", "op1"]
    assert [r.operation_id for r in await store.list(status="refused")] == ["op2", "op1", "op0"]
    assert [r.operation_id for r in await store.list(limit=2, before=1004.0)] == ["op3", "op2"]
    await store.close()


async def test_forget_only_drops_running_claims(tmp_path):
    store = await _store(tmp_path)
    await store.begin("a", "t", "h", None, None)
    await store.begin("b", "t", "h", None, None)
    await store.finish("b", "succeeded")
    await store.forget("a")
    await store.forget("b")
    assert await store.get("a") is None and (await store.get("b")).status == "succeeded"
    await store.close()


async def test_concurrent_begins_claim_once(tmp_path):
    store = await _store(tmp_path)
    outcomes = []

    async def claim() -> None:
        outcomes.append((await store.begin("same", "t", "h", None, None)).outcome)

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(claim)
    assert sorted(outcomes) == ["existing"] * 19 + ["new"]
    await store.close()


async def test_two_processes_share_one_store(tmp_path):
    store = await _store(tmp_path)
    await store.begin("shared", "t", "h", None, None)
    code = (
        "import anyio, sys\n"
        "from codespace.store import SQLiteStore\n"
        "async def main():\n"
        f"    s = await SQLiteStore(__import__('pathlib').Path({str(tmp_path / 'ops.sqlite3')!r})).open()\n"
        "    b = await s.begin('shared', 't', 'h', None, None)\n"
        "    print(b.outcome, b.record.status)\n"
        "anyio.run(main)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["existing", "running"]
    await store.close()


async def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "ops.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(path).open_sync()


async def test_corrupt_file_is_reported(tmp_path):
    path = tmp_path / "ops.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot be opened"):
        SQLiteStore(path).open_sync()


async def test_network_audit_events(tmp_path):
    from codespace.store import NetworkEvent

    store = await _store(tmp_path)
    await store.record_network([
        NetworkEvent(at=1.0, operation_id="op-a", decision="allow", reason="allowed", protocol="connect",
                     host="pypi.org", port=443),
        NetworkEvent(at=2.0, operation_id="op-b", decision="deny", reason="denylist", protocol="http",
                     host="evil.test", port=80, method="GET"),
    ])
    assert [e.host for e in await store.network()] == ["evil.test", "pypi.org"]
    only = await store.network(operation_id="op-a")
    assert len(only) == 1 and only[0].decision == "allow" and only[0].method is None
    await store.close()


async def test_schema_1_store_is_upgraded(tmp_path):
    path = tmp_path / "ops.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(sqlite_store._SCHEMA.split("CREATE TABLE IF NOT EXISTS network_events")[0])
    conn.execute("PRAGMA user_version=1")
    conn.close()
    store = SQLiteStore(path).open_sync()
    assert store.network_sync() == []
    store.close_sync()


async def test_a_lock_held_past_the_busy_timeout_delays_a_write_and_loses_nothing(tmp_path):
    """Found by testing: another process holding the database (an operator's sqlite3 shell, a
    backup) past the 5 s busy timeout made the record of finished work stay ``running``."""
    store = await _store(tmp_path)
    await store.begin("k", "tool", "h", "{}", "c")
    other = sqlite3.connect(tmp_path / "ops.sqlite3", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")

    def release_later() -> None:
        time.sleep(6.5)
        other.execute("ROLLBACK")
        other.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, release_later)
        started = time.monotonic()
        await store.finish("k", "succeeded", result={"done": True})
        waited = time.monotonic() - started
    record = await store.get("k")
    assert record.status == "succeeded" and record.result == {"done": True} and waited > 6, (record, waited)
    await store.close()

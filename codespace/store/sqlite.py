"""The embedded operation store: one SQLite file (WAL) in the state directory.

All SQLite work runs on a worker thread, one statement batch at a time (a
capacity limiter of 1 serialises the single connection), so the event loop never
blocks on disk. ``synchronous=NORMAL`` in WAL mode keeps every committed
transaction across a process crash (kill -9); only a power loss can drop the last
ones, and then the operation simply re-runs as new.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .base import (
    FINISHED,
    INTERRUPTED,
    Begin,
    NetworkEvent,
    OperationRecord,
    Status,
    now,
    owner_alive,
    owner_token,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    tool         TEXT NOT NULL,
    args_hash    TEXT NOT NULL,
    arguments    TEXT,
    status       TEXT NOT NULL,
    result       TEXT,
    error        TEXT,
    rule         TEXT,
    client       TEXT,
    owner        TEXT,
    pgid         INTEGER,
    pgid_start   INTEGER,
    created_at   REAL NOT NULL,
    finished_at  REAL
);
CREATE INDEX IF NOT EXISTS operations_created ON operations (created_at);
CREATE INDEX IF NOT EXISTS operations_running ON operations (status) WHERE status = 'running';
CREATE TABLE IF NOT EXISTS network_events (
    at           REAL NOT NULL,
    operation_id TEXT,
    decision     TEXT NOT NULL,
    reason       TEXT NOT NULL,
    protocol     TEXT NOT NULL,
    host         TEXT NOT NULL,
    port         INTEGER NOT NULL,
    method       TEXT
);
CREATE INDEX IF NOT EXISTS network_events_at ON network_events (at);
CREATE INDEX IF NOT EXISTS network_events_operation ON network_events (operation_id);
"""
_COLUMNS = (
    "operation_id, tool, args_hash, arguments, status, result, error, rule, client, owner, pgid, pgid_start, "
    "created_at, finished_at"
)
PRUNE_EVERY = 500
BUSY_RETRY_S = 60.0
"""How long a store call waits, in all, for another process to release the database."""


class StoreError(Exception):
    """The store cannot be opened or used; the message names the file and a remedy."""


def _row(row: tuple[Any, ...]) -> OperationRecord:
    (op, tool, args_hash, arguments, status, result, error, rule, client, owner, pgid, pgid_start, created, finished) = row
    return OperationRecord(
        operation_id=op,
        tool=tool,
        args_hash=args_hash,
        arguments=arguments,
        status=status,
        result=json.loads(result) if result else None,
        error=error,
        rule=rule,
        client=client,
        owner=owner,
        pgid=pgid,
        pgid_start=pgid_start,
        created_at=created,
        finished_at=finished,
    )


class SQLiteStore:
    def __init__(self, path: Path, *, max_records: int = 10_000, max_age_days: float = 30.0) -> None:
        self.path = path
        self.max_records = max_records
        self.max_age_s = max_age_days * 86400
        self.owner = owner_token()
        self._limiter = anyio.CapacityLimiter(1)
        self._conn: sqlite3.Connection | None = None
        self._finished_since_prune = 0

    # -- lifecycle ---------------------------------------------------------

    def open_sync(self) -> SQLiteStore:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"operation store {self.path} has schema version {version}, newer than this CodeSpace "
                    f"({SCHEMA_VERSION}); upgrade CodeSpace or use another --state-dir"
                )
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"operation store {self.path} cannot be opened ({exc}); move it aside or use another --state-dir"
            ) from exc
        except OSError as exc:
            raise StoreError(f"operation store {self.path} cannot be created: {exc.strerror or exc}") from exc
        self._conn = conn
        self._prune()
        return self

    async def open(self) -> SQLiteStore:
        return await anyio.to_thread.run_sync(self.open_sync, limiter=self._limiter)

    def close_sync(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.close_sync, limiter=self._limiter)

    def journal_mode_sync(self) -> str:
        return self._db().execute("PRAGMA journal_mode").fetchone()[0]

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("operation store is closed")
        return self._conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        # Another process (an operator's sqlite3 shell, a backup, a second server on the same
        # directory) may hold the database's lock past the 5 s busy timeout: the call waits and
        # tries again rather than fail (found by testing: the record of work already done stayed
        # ``running`` and the agent got an internal error).
        deadline = time.monotonic() + BUSY_RETRY_S
        while True:
            try:
                return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
                log.warning("operation store %s is locked by another process (%s); trying again", self.path, exc)
                await anyio.sleep(0.1)

    # -- operations ---------------------------------------------------------

    def _begin(self, operation_id: str, tool: str, args_hash: str, arguments: str | None, client: str | None) -> Begin:
        db = self._db()
        created = now()
        cur = db.execute(
            "INSERT INTO operations (operation_id, tool, args_hash, arguments, status, client, owner, created_at) "
            "VALUES (?, ?, ?, ?, 'running', ?, ?, ?) ON CONFLICT (operation_id) DO NOTHING",
            (operation_id, tool, args_hash, arguments, client, self.owner, created),
        )
        if cur.rowcount == 1:
            record = OperationRecord(
                operation_id=operation_id, tool=tool, args_hash=args_hash, arguments=arguments,
                status="running", client=client, owner=self.owner, created_at=created,
            )
            return Begin("new", record)
        existing = self.get_sync(operation_id)
        assert existing is not None
        return Begin("existing" if existing.args_hash == args_hash else "conflict", existing)

    async def begin(
        self, operation_id: str, tool: str, args_hash: str, arguments: str | None, client: str | None
    ) -> Begin:
        return await self._run(self._begin, operation_id, tool, args_hash, arguments, client)

    def _finish(
        self, operation_id: str, status: Status, result: dict[str, Any] | None, error: str | None, rule: str | None
    ) -> None:
        self._db().execute(
            "UPDATE operations SET status = ?, result = ?, error = ?, rule = ?, finished_at = ? "
            "WHERE operation_id = ?",
            (status, json.dumps(result) if result is not None else None, error, rule, now(), operation_id),
        )
        self._finished_since_prune += 1
        if self._finished_since_prune >= PRUNE_EVERY:
            self._prune()

    async def finish(
        self,
        operation_id: str,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        rule: str | None = None,
    ) -> None:
        await self._run(self._finish, operation_id, status, result, error, rule)

    def _set_interim(self, operation_id: str, result: dict[str, Any]) -> None:
        self._db().execute(
            "UPDATE operations SET result = ? WHERE operation_id = ? AND status = 'running'",
            (json.dumps(result), operation_id),
        )

    async def set_interim(self, operation_id: str, result: dict[str, Any]) -> None:
        await self._run(self._set_interim, operation_id, result)

    def _forget(self, operation_id: str) -> None:
        self._db().execute("DELETE FROM operations WHERE operation_id = ? AND status = 'running'", (operation_id,))

    async def forget(self, operation_id: str) -> None:
        await self._run(self._forget, operation_id)

    def _insert_finished(self, r: OperationRecord) -> None:
        self._db().execute(
            f"INSERT OR IGNORE INTO operations ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                r.operation_id, r.tool, r.args_hash, r.arguments, r.status,
                json.dumps(r.result) if r.result is not None else None, r.error, r.rule, r.client,
                r.owner or self.owner, r.pgid, r.pgid_start, r.created_at, r.finished_at or now(),
            ),
        )

    async def insert_finished(self, record: OperationRecord) -> None:
        await self._run(self._insert_finished, record)

    def _attach_process(self, operation_id: str, pgid: int, pgid_start: int | None) -> None:
        self._db().execute(
            "UPDATE operations SET pgid = ?, pgid_start = ? WHERE operation_id = ?", (pgid, pgid_start, operation_id)
        )

    async def attach_process(self, operation_id: str, pgid: int, pgid_start: int | None) -> None:
        await self._run(self._attach_process, operation_id, pgid, pgid_start)

    def get_sync(self, operation_id: str) -> OperationRecord | None:
        row = self._db().execute(f"SELECT {_COLUMNS} FROM operations WHERE operation_id = ?", (operation_id,)).fetchone()
        return _row(row) if row else None

    async def get(self, operation_id: str) -> OperationRecord | None:
        return await self._run(self.get_sync, operation_id)

    def list_sync(self, limit: int, status: Status | None, tool: str | None, before: float | None) -> list[OperationRecord]:
        clauses, params = [], []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if tool is not None:
            clauses.append("tool = ?")
            params.append(tool)
        if before is not None:
            clauses.append("created_at < ?")
            params.append(before)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db().execute(
            f"SELECT {_COLUMNS} FROM operations {where} ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [_row(r) for r in rows]

    async def list(
        self, *, limit: int = 50, status: Status | None = None, tool: str | None = None, before: float | None = None
    ) -> list[OperationRecord]:
        return await self._run(self.list_sync, limit, status, tool, before)

    def _recover(self, keep: Collection[str]) -> list[OperationRecord]:
        db = self._db()
        rows = db.execute(f"SELECT {_COLUMNS} FROM operations WHERE status = 'running'").fetchall()
        interrupted = []
        for record in map(_row, rows):
            if record.owner == self.owner or owner_alive(record.owner):
                continue  # another live server sharing this store still runs it
            if record.operation_id in keep:
                db.execute("UPDATE operations SET owner = ? WHERE operation_id = ? AND status = 'running'",
                           (self.owner, record.operation_id))
                continue
            db.execute(
                "UPDATE operations SET status = 'interrupted', finished_at = ?, error = ? "
                "WHERE operation_id = ? AND status = 'running'",
                (now(), INTERRUPTED, record.operation_id),
            )
            interrupted.append(record.model_copy(update={"status": "interrupted"}))
        return interrupted

    async def recover(self, keep: Collection[str] = ()) -> list[OperationRecord]:
        return await self._run(self._recover, frozenset(keep))

    def _record_network(self, events: list[NetworkEvent]) -> None:
        self._db().executemany(
            "INSERT INTO network_events (at, operation_id, decision, reason, protocol, host, port, method) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(e.at, e.operation_id, e.decision, e.reason, e.protocol, e.host, e.port, e.method) for e in events],
        )

    async def record_network(self, events: list[NetworkEvent]) -> None:
        if events:
            await self._run(self._record_network, events)

    def network_sync(self, *, limit: int = 100, operation_id: str | None = None) -> list[NetworkEvent]:
        where, params = ("WHERE operation_id = ?", [operation_id]) if operation_id else ("", [])
        rows = self._db().execute(
            "SELECT at, operation_id, decision, reason, protocol, host, port, method FROM network_events "
            f"{where} ORDER BY at DESC, rowid DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [NetworkEvent(at=r[0], operation_id=r[1], decision=r[2], reason=r[3], protocol=r[4], host=r[5],
                             port=r[6], method=r[7]) for r in rows]

    async def network(self, *, limit: int = 100, operation_id: str | None = None) -> list[NetworkEvent]:
        return await self._run(lambda: self.network_sync(limit=limit, operation_id=operation_id))

    def _prune(self) -> None:
        db = self._db()
        finished = ",".join(f"'{s}'" for s in FINISHED)
        db.execute(f"DELETE FROM operations WHERE status IN ({finished}) AND created_at < ?", (now() - self.max_age_s,))
        db.execute(
            f"DELETE FROM operations WHERE status IN ({finished}) AND rowid NOT IN "
            "(SELECT rowid FROM operations ORDER BY created_at DESC LIMIT ?)",
            (self.max_records,),
        )
        db.execute("DELETE FROM network_events WHERE at < ?", (now() - self.max_age_s,))
        db.execute(
            "DELETE FROM network_events WHERE rowid NOT IN (SELECT rowid FROM network_events ORDER BY at DESC LIMIT ?)",
            (self.max_records * 10,),
        )
        self._finished_since_prune = 0

    async def prune(self) -> None:
        await self._run(self._prune)

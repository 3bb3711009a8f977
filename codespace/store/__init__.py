"""The operation store: identity, idempotency and crash recovery for side effects."""

from .base import (
    INTERRUPTED,
    Begin,
    NetworkEvent,
    OperationRecord,
    OperationStore,
    Status,
    owner_alive,
    owner_token,
    proc_start_ticks,
)

# The SQLite store loads where it is used: the tools' result models need only the records'
# types, and a server without a kept tool listing builds the listing from them.


def __getattr__(name: str):  # noqa: ANN202
    if name in ("SQLiteStore", "StoreError"):
        from . import sqlite

        return getattr(sqlite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "INTERRUPTED",
    "Begin",
    "NetworkEvent",
    "OperationRecord",
    "OperationStore",
    "SQLiteStore",
    "Status",
    "StoreError",
    "owner_alive",
    "owner_token",
    "proc_start_ticks",
]

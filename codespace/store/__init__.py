"""The operation store: identity, idempotency and crash recovery for side effects."""

from .base import (
    Begin,
    NetworkEvent,
    OperationRecord,
    OperationStore,
    Status,
    owner_alive,
    owner_token,
    proc_start_ticks,
)
from .sqlite import SQLiteStore, StoreError

__all__ = [
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

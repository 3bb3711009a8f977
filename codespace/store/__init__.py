"""The operation store: identity, idempotency and crash recovery for side effects."""

from .base import Begin, OperationRecord, OperationStore, Status, owner_alive, owner_token, proc_start_ticks
from .sqlite import SQLiteStore, StoreError

__all__ = [
    "Begin",
    "OperationRecord",
    "OperationStore",
    "SQLiteStore",
    "Status",
    "StoreError",
    "owner_alive",
    "owner_token",
    "proc_start_ticks",
]

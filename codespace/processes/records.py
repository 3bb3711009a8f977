"""The operation store's side of command sessions (the contract's ``SessionRecords``).

The registry reports a command's start and the end of a command whose ``exec`` call had
returned; this turns both into store writes. A worker that owns sessions reports the same
two events over its socket, and the server writes them here too."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import NetworkEvent, OperationStore

log = logging.getLogger(__name__)
SHUTDOWN_ERROR = "the server shut down; the command was terminated"


class StoreRecords:
    def __init__(self, store: OperationStore) -> None:
        self.store = store

    async def started(self, operation_id: str, pid: int, start_ticks: int | None) -> None:
        await self.store.attach_process(operation_id, pid, start_ticks)

    async def ended(self, operation_id: str, status: dict, *, shutdown: bool) -> None:
        # The stored result stays what the exec call returned, with its final status: a
        # replay then says how the command ended.
        try:
            record = await self.store.get(operation_id)
            if record is None or record.status != "running":
                return  # finished already (by another server sharing the worker, or recovery)
            final = {**(record.result or {}), **status}
            await self.store.finish(operation_id, "cancelled" if shutdown else "succeeded", result=final,
                                    error=SHUTDOWN_ERROR if shutdown else None)
        except Exception:  # noqa: BLE001 - the store may already be closing; the record stays for recovery
            log.exception("cannot record the end of the command of operation %s", operation_id)

    async def record_network(self, events: list[NetworkEvent]) -> None:
        """The egress proxy's decisions, from where the commands run (a worker's proxy): the
        contract's ``NetworkAudit`` too."""
        await self.store.record_network(events)

    async def lost(self, operation_id: str, reason: str) -> None:
        try:
            record = await self.store.get(operation_id)
            if record is not None and record.status == "running":
                await self.store.finish(operation_id, "interrupted", result=record.result, error=reason)
        except Exception:  # noqa: BLE001 - as above
            log.exception("cannot record the loss of the command of operation %s", operation_id)

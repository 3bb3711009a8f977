"""The egress proxy's audit trail, as a plugin writes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..store.base import NetworkEvent


class NetworkAudit(Protocol):
    """Where network decisions are recorded (the operation store passed to ``codespace_services``)."""

    async def record_network(self, events: list[NetworkEvent]) -> None:
        """Append ``events`` (connections allowed or denied, with the operation that made them)."""

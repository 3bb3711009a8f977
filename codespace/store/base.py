"""The operation store contract: records, outcomes of ``begin``, and the interface.

The embedded implementation is SQLite (:mod:`codespace.store.sqlite`); the
interface is small so a shared database can back several gateways later.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import Field

from ..models import Strict
from ..procfs import start_ticks

Status = Literal["running", "succeeded", "failed", "refused", "interrupted", "cancelled"]
FINISHED: tuple[Status, ...] = ("succeeded", "failed", "refused", "interrupted", "cancelled")
INTERRUPTED = "the server running this operation stopped before it finished"
"""The error an interrupted operation's record holds."""


class OperationRecord(Strict):
    """One side-effecting call (or any refusal), as stored."""


    operation_id: str
    tool: str
    args_hash: str = Field(description="SHA-256 of the canonical JSON arguments (tool name included).")
    arguments: str | None = Field(default=None, description="Arguments as JSON, shortened for display.")
    status: Status
    result: dict[str, Any] | None = Field(default=None, description="Structured result, or the error as a dict.")
    error: str | None = None
    rule: str | None = Field(default=None, description="The policy rule that refused the call.")
    client: str | None = None
    owner: str | None = Field(default=None, description="The server instance that ran it (pid:start:boot).")
    pgid: int | None = Field(default=None, description="Process group the operation started, if any.")
    pgid_start: int | None = Field(default=None, description="Start time (clock ticks) of the group's leader.")
    created_at: float
    finished_at: float | None = None


class NetworkEvent(Strict):
    """One decision of the egress proxy: never a full URL, only host, port and method."""


    at: float
    operation_id: str | None = Field(default=None, description="The command whose connection it was.")
    decision: Literal["allow", "deny"]
    reason: str
    protocol: str = Field(description="http, connect, socks5 or socks5-udp.")
    host: str
    port: int
    method: str | None = None


BeginOutcome = Literal["new", "existing", "conflict"]


@dataclass(frozen=True)
class Begin:
    outcome: BeginOutcome
    record: OperationRecord


class OperationStore(Protocol):
    async def begin(
        self, operation_id: str, tool: str, args_hash: str, arguments: str | None, client: str | None
    ) -> Begin:
        """Claim ``operation_id`` for a new run, or return the record already holding it."""

    async def finish(
        self,
        operation_id: str,
        status: Status,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        rule: str | None = None,
    ) -> None: ...

    async def set_interim(self, operation_id: str, result: dict[str, Any]) -> None:
        """Store the result a still-running operation returned so far (no-op once finished)."""

    async def forget(self, operation_id: str) -> None:
        """Drop a running claim whose call never started executing, freeing the key."""

    async def insert_finished(self, record: OperationRecord) -> None:
        """Store a record that never ran (a refusal of a read-only call)."""

    async def attach_process(self, operation_id: str, pgid: int, pgid_start: int | None) -> None:
        """Remember the process group an operation started, so a restart can reap it."""

    async def get(self, operation_id: str) -> OperationRecord | None: ...

    async def record_network(self, events: list[NetworkEvent]) -> None:
        """Append egress-proxy decisions (the audit trail)."""

    async def network(self, *, limit: int = 100, operation_id: str | None = None) -> list[NetworkEvent]: ...

    async def list(
        self, *, limit: int = 50, status: Status | None = None, tool: str | None = None, before: float | None = None
    ) -> list[OperationRecord]: ...

    async def recover(self, keep: Collection[str] = ()) -> list[OperationRecord]:
        """Mark operations of dead servers ``interrupted``; return them (with their pgids to reap).
        ``keep``: operations that still run elsewhere (a daemon worker's commands) and that this
        server takes over: they stay ``running``, owned by this server."""

    async def close(self) -> None: ...


proc_start_ticks = start_ticks


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def owner_token(pid: int | None = None) -> str:
    """Identify a live process across pid reuse: pid, start time and boot."""
    pid = pid or os.getpid()
    return f"{pid}:{proc_start_ticks(pid)}:{_boot_id()}"


def owner_alive(token: str | None) -> bool:
    if not token:
        return False
    try:
        pid_text, start_text, boot = token.split(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if boot != _boot_id():
        return False
    # A zombie is dead (found by testing from outside: a SIGKILLed server under a launcher that
    # did not reap kept its operations running).
    ticks = start_ticks(pid, living=True)
    return ticks is not None and str(ticks) == start_text


def now() -> float:
    return time.time()

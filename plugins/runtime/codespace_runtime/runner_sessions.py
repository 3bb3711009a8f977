"""The worker's command sessions: the core's own session work (``gate.command_sessions``) on a
registry of the worker, served as ``proc.*`` over protocol 5.

The server's gateway has checked the call and recorded the operation; the worker judges the
command and its directory again against the policy it loaded itself, builds the command line and
environment from that policy and its own environment, takes its own sandbox decision and runs
the command. What the operation store must hold goes back to the server as notifications to the
connection that started the command (``proc.started``: its process group; ``proc.ended``: how a
command whose exec call had returned ended). When that connection has gone (the server was
killed), the end is kept until a server adopts the session (``proc.adopt``), so a daemon worker's
sessions outlive the server that started them and are recorded by the next one.
"""

from __future__ import annotations

import logging
from typing import Any

from codespace.contract import ToolError, hosting

from .errors_wire import NotRun
from .framing import close_all as _close
from .judging import Judge
from .service import Connection, current_connection

log = logging.getLogger(__name__)
MAX_UNHEARD_NETWORK = 10_000
MAX_STARTED_BY = 4096

# method -> the sessions' method; the paths each reads (judged again here)
_METHODS = {
    "proc.write_stdin": "write_stdin", "proc.read_output": "read_output", "proc.resize": "resize",
    "proc.terminate": "terminate", "proc.list_sessions": "list_sessions",
}


class WorkerRecords:
    """``SessionRecords`` of a worker: each event goes to the connection that owns the session."""

    def __init__(self) -> None:
        self.live: Any = set
        """The operation ids the registry still holds (set once the registry exists)."""
        self.owners: dict[str, Connection] = {}
        self.unheard: dict[str, dict] = {}
        """Ends no connection has heard of yet: operation id -> notification params."""
        self.started_by: dict[str, Connection] = {}
        """Which connection started each recent command (bounded, oldest first): where its
        egress-proxy decisions go, which the proxy reports after the command may have ended."""
        self.unheard_network: list[dict] = []
        """Egress-proxy decisions whose command's connection had gone (its server was killed)."""

    async def started(self, operation_id: str, pid: int, start_ticks: int | None) -> None:
        try:
            owner = current_connection()  # the exec request's own connection
        except LookupError:
            return
        held = self.live()  # a session whose exec call returned finished is never ended here: drop it
        self.owners = {op: conn for op, conn in self.owners.items() if op in held}
        self.owners[operation_id] = owner
        self.started_by[operation_id] = owner
        while len(self.started_by) > MAX_STARTED_BY:
            del self.started_by[next(iter(self.started_by))]
        await owner.notify("proc.started", {"operation_id": operation_id, "pid": pid, "start_ticks": start_ticks})

    async def ended(self, operation_id: str, status: dict, *, shutdown: bool) -> None:
        params = {"operation_id": operation_id, "status": status, "shutdown": shutdown}
        owner = self.owners.pop(operation_id, None)
        if owner is not None and owner.is_open:
            await owner.notify("proc.ended", params)
        else:
            self.unheard[operation_id] = params

    async def record_network(self, events: list[Any]) -> None:
        """The contract's ``NetworkAudit`` for the worker's egress proxy: each decision goes to
        the connection that owns its command (``net.events``), whose server stores it; with
        that connection gone it waits for the server that adopts the sessions."""
        by_owner: dict[Connection, list[dict]] = {}
        for event in events:
            owner = self.owners.get(event.operation_id) or self.started_by.get(event.operation_id)
            if owner is not None and owner.is_open:
                by_owner.setdefault(owner, []).append(event.model_dump(mode="json"))
            else:
                self.unheard_network.append(event.model_dump(mode="json"))
        del self.unheard_network[:-MAX_UNHEARD_NETWORK]  # a bound: nobody may be coming back
        for owner, dumped in by_owner.items():
            await owner.notify("net.events", {"events": dumped})

    def adopt(self, connection: Connection, live: list[str]) -> dict:
        """Make ``connection`` the owner of every session whose owner has gone; hand it the ends
        nobody heard of. What it takes it must record (or keep running, for live ones)."""
        taken = []
        for operation_id in live:
            owner = self.owners.get(operation_id)
            if owner is None or not owner.is_open:
                self.owners[operation_id] = connection
                taken.append(operation_id)
        ended, self.unheard = list(self.unheard.values()), {}
        network, self.unheard_network = self.unheard_network, []
        return {"running": taken, "ended": ended, "network": network}


def session_handlers(workspace: Any, backends: Any) -> tuple[dict, Any, WorkerRecords]:
    """The ``proc.*`` handlers, the registry (enter ``registry.running()`` for the worker's
    life) and the records."""
    records = WorkerRecords()
    sessions, registry = hosting.command_sessions(workspace, backends, records)
    records.live = lambda: {s.operation_id for s in registry.sessions()}
    judge = Judge(workspace)

    def params_of(params: dict, key: str = "args") -> dict:
        value = params.get(key, {})
        if not isinstance(value, dict):
            raise NotRun(ToolError(f"the worker needs params.{key} as an object", code="bad_params"))
        return value

    async def exec_(params: dict, fds: list[int]) -> dict:
        _close(fds)
        args = params_of(params)
        operation_id = params.get("operation_id")
        if operation_id is not None and not isinstance(operation_id, str):
            raise NotRun(ToolError("the worker needs params.operation_id as a string or null", code="bad_params"))
        judge.command(args)
        return await sessions.exec(args, operation_id)

    def forward(name: str):  # noqa: ANN202
        async def handle(params: dict, fds: list[int]) -> dict:
            _close(fds)
            return await getattr(sessions, name)(params_of(params))

        return handle

    async def adopt(params: dict, fds: list[int]) -> dict:
        _close(fds)
        live = [s.operation_id for s in registry.sessions() if s.operation_id is not None and s.detached
                and not s.settled.is_set()]
        return records.adopt(current_connection(), live)

    handlers = {"proc.exec": exec_, "proc.adopt": adopt, **{m: forward(n) for m, n in _METHODS.items()}}
    return handlers, registry, records

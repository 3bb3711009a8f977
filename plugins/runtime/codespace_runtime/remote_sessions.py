"""The server's side of the worker's command sessions: the contract's ``CommandSessions``,
performed by the worker (``proc.*``), and the worker's notifications turned into store writes
through the core's ``SessionRecords``.

The arguments are the tool's, checked by the server's gateway; the worker judges them again.
Results and errors come back as they would in-process (errors through ``errors_wire``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .framing import close_all
from .lifecycle import Worker
from .worker_calls import call_worker

log = logging.getLogger(__name__)


class RemoteSessions:
    def __init__(self, worker: Worker, records: Any) -> None:
        self.worker = worker
        self.records = records
        self._tasks: set[asyncio.Task] = set()
        self._live: set[str] = set()
        """Operations whose commands run in the worker (started, not yet ended)."""
        worker.on_notification(self._notified)
        worker.on_lost(self._lost)
        worker.on_stop(self._stopping)

    # -- notifications -----------------------------------------------------------

    def _notified(self, method: str, params: dict, fds: list[int]) -> None:
        close_all(fds)
        if method == "proc.started":
            self._spawn(self.records.started(params["operation_id"], params["pid"], params.get("start_ticks")))
        elif method == "proc.ended":
            self._live.discard(params["operation_id"])
            self._spawn(self._ended(params))
        elif method == "net.events":
            self._spawn(self._network(params.get("events")))

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _lost(self, reason: str) -> None:
        """The worker dropped the connection. A child worker is gone, and so are its commands
        (they die with it; the next worker also kills what its cgroups still hold, and starts
        now). A daemon that has ended took its sessions with it: nobody can read them again. In
        both cases their operations are marked interrupted. A daemon that still serves keeps
        its sessions: this server takes them back on a new connection."""
        if self.worker.stopped:
            return
        if self.worker.mode == "child":
            if self._mark_lost(f"the child worker running this command died ({reason}); its processes were "
                               "ended with it"):
                self._spawn(self._replace())  # at its start it kills what the dead one's cgroups still hold
        elif self._live:
            self._spawn(self._daemon_lost(reason, self.worker.pid))

    def _mark_lost(self, what: str) -> int:
        lost, self._live = self._live, set()
        for operation_id in lost:
            self._spawn(self.records.lost(operation_id, f"{what}. Run the command again with a new operation_id."))
        return len(lost)

    async def _daemon_lost(self, reason: str, pid: int | None) -> None:
        if await self.worker.has_ended():
            self._mark_lost(f"the daemon worker (pid {pid}) running this command ended ({reason}); its session "
                            "went with it")
            return
        try:  # the same daemon, still serving: take its sessions back at once
            await self.worker.client()
            await self.adopt()
        except Exception as exc:  # noqa: BLE001 - the next call says so, and workspace_info
            log.warning("the daemon still serves but its sessions could not be taken back: %s", exc)

    async def _stopping(self) -> None:
        """The server stops its child worker, and the worker's commands end with it: their
        operations say so (``cancelled``, as in-process), before the store closes. A daemon's
        sessions go on; the next server adopts them."""
        if self.worker.mode == "child":
            ended, self._live = self._live, set()
            for operation_id in ended:
                await self.records.ended(operation_id, {"running": False}, shutdown=True)
        await self.settled()

    async def _replace(self) -> None:
        try:
            await self.worker.client()
        except Exception as exc:  # noqa: BLE001 - said again by the next call, and in workspace_info
            log.warning("no new worker after a loss: %s", exc)

    async def _network(self, events: Any) -> None:
        """The worker's egress-proxy decisions, into this server's store."""
        from codespace.contract import NetworkEvent

        if not isinstance(events, list) or not events:
            return
        try:
            await self.records.record_network([NetworkEvent.model_validate(e) for e in events])
        except Exception:  # noqa: BLE001 - a malformed event or a closing store loses the audit, not the server
            log.exception("the worker's network events could not be recorded")

    async def _ended(self, params: dict) -> None:
        await self.records.ended(params["operation_id"], params["status"], shutdown=bool(params.get("shutdown")))

    # -- calls -------------------------------------------------------------------

    async def _call(self, method: str, params: dict, what: str) -> dict:
        return await call_worker(self.worker, method, params, what)

    async def exec(self, params: dict, operation_id: str | None) -> dict:
        result = await self._call("proc.exec", {"args": params, "operation_id": operation_id}, "exec")
        if result.get("running") and operation_id is not None:
            self._live.add(operation_id)  # its exec call returned: its end comes as proc.ended
        return result

    async def write_stdin(self, params: dict) -> dict:
        return await self._call("proc.write_stdin", {"args": params}, "write_stdin")

    async def read_output(self, params: dict) -> dict:
        return await self._call("proc.read_output", {"args": params}, "read_output")

    async def resize(self, params: dict) -> dict:
        return await self._call("proc.resize", {"args": params}, "resize")

    async def terminate(self, params: dict) -> dict:
        return await self._call("proc.terminate", {"args": params}, "terminate")

    async def list_sessions(self, params: dict) -> dict:
        return await self._call("proc.list_sessions", {"args": params}, "list_sessions")

    async def adopt(self) -> dict:
        """Sessions a daemon worker holds whose server has gone: this server keeps their
        operations running (it does not mark them interrupted) and records here the ends and
        network decisions nobody heard of. A child worker is new with this server: nothing to adopt, nothing started."""
        if self.worker.mode != "daemon":
            return {"running": [], "ended": []}
        held = await self._call("proc.adopt", {}, "adopt sessions")
        self._live.update(held["running"])  # their ends now come to this server
        for ended in held["ended"]:  # ended while no server was attached to the worker
            await self._ended(ended)
        await self._network(held.get("network"))
        return held

    async def settled(self) -> None:
        """Wait for the store writes of notifications already received (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

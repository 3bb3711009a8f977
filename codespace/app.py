"""Assemble one served workspace: policy, plugins, tools, store, gateway.

Building is synchronous and cheap (it is on the server-ready path); opening the
store and recovering from a crash happen in :meth:`App.running`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from . import reaper
from .app_parts import load_tools
from .backends import Backends
from .contract import ToolError
from .gateway import Gateway
from .plugins import Plugins, supervised
from .processes import ProcessRegistry
from .processes.records import StoreRecords
from .store import OperationRecord, SQLiteStore
from .tooling import ToolRegistry
from .tools.command_sessions import LocalSessions
from .workspace import Workspace

log = logging.getLogger(__name__)


STORE_FILE = "operations.sqlite3"
STOP_GRACE_S = 0.02  # at shutdown, SIGTERM then SIGKILL after this long


@dataclass
class App:
    workspace: Workspace
    plugins: Plugins
    registry: ToolRegistry
    backends: Backends
    store: SQLiteStore
    processes: ProcessRegistry
    gateway: Gateway
    recovered: list[OperationRecord] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        workspace: str | os.PathLike[str] | None = None,
        *,
        policy: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> App:
        return cls.assemble(*load_tools(workspace, policy=policy, state_dir=state_dir, env=env))

    @classmethod
    def assemble(cls, ws: Workspace, plugins: Plugins, registry: ToolRegistry) -> App:
        """The rest of the App around the parts :func:`codespace.app_parts.load_tools` made."""
        store = SQLiteStore(
            ws.state_dir / STORE_FILE,
            max_records=ws.policy.store.max_records,
            max_age_days=ws.policy.store.max_age_days,
        )
        records = StoreRecords(store)
        backends = Backends(plugins, ws, records=records)
        processes = ProcessRegistry(ws, backends, records)
        gateway = Gateway(ws, registry, backends, plugins, store, processes, LocalSessions(ws, backends, processes))
        return cls(ws, plugins, registry, backends, store, processes, gateway)

    async def _adopt(self) -> dict[str, Any]:
        """The sessions a worker holds from a server that has gone (a daemon outlives servers):
        their operations stay running, now this server's, instead of being marked interrupted
        and reaped. A worker that cannot be reached holds nothing we could adopt."""
        nothing: dict[str, Any] = {"running": [], "ended": []}
        if not self.backends.commands_remote():
            return nothing
        adopt = getattr(self.gateway.sessions(), "adopt", None)
        if adopt is None:
            return nothing
        try:
            return await adopt()
        except ToolError as exc:
            log.warning("cannot ask the worker for the sessions it holds: %s", exc.message)
            return nothing

    @asynccontextmanager
    async def running(self) -> AsyncIterator[App]:
        """Open the store, recover from a crashed predecessor, serve, shut down cleanly."""
        self.workspace.ensure_state_dir()
        await self.store.open()
        try:
            held = await self._adopt()
            self.recovered = await self.store.recover(keep=[*held["running"], *(e["operation_id"] for e in held["ended"])])
            if self.recovered:
                log.warning("%d operation(s) of a stopped server marked interrupted", len(self.recovered))
                reaper.reap(self.recovered)
            # Recovery runs in this process, before a worker (if any) serves: a plugin may run
            # it on a private event loop, where a worker's connection could not be used.
            self.plugins.startup(self.workspace, self.backends.in_process())
            async with anyio.create_task_group() as services:
                for plugin, service in self.plugins.services(self.workspace, self.backends.for_services(), self.store):
                    services.start_soon(supervised, plugin, service)
                # Commands a worker owns are its registry's: this one stays idle and must not
                # clear the state directory's command cgroups, which are the worker's.
                local = contextlib.nullcontext() if self.backends.commands_remote() else self.processes.running()
                async with local:
                    try:
                        yield self
                    finally:
                        with anyio.CancelScope(shield=True):
                            # A short grace: an agent's client that stops the server sends SIGINT, then
                            # SIGTERM 100 ms later, then kills it; an interactive shell ignores SIGTERM.
                            await self.processes.shutdown(STOP_GRACE_S)
                services.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):  # a signal's cancellation must not skip the close
                await self.store.close()

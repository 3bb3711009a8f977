"""What a process that serves a workspace in the server's stead (a worker) runs of the core:
the command tools' session work and the tools that act on the workspace themselves. Above
:mod:`codespace.contract.gate` in the import tower (these reach into the gateway and the
process registry, which use the gate)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends import Backends
    from .commands import CommandSessions, SessionRecords
    from .network import NetworkAudit
    from .workspace import WorkspaceView


def tool_host(workspace: WorkspaceView, backends: Backends) -> Any:
    """The core's runner of ``runs_on_workspace`` tools for a process that serves the workspace
    in the server's stead (a worker), over the plugins ``backends`` were built from:
    ``prepare(name, params, operation_id)`` validates and judges (raises before anything runs),
    ``await run(prepared)`` runs the handler and returns its result as JSON."""
    from ..tool_host import ToolHost

    return ToolHost(workspace, backends)  # type: ignore[arg-type]


def command_sessions(workspace: WorkspaceView, backends: Backends, records: SessionRecords) -> tuple[CommandSessions, Any]:
    """The core's command sessions for a process that owns them in the server's stead (a
    worker): the command tools' work on a registry of this process, reporting starts and ends
    to ``records``. Returns (sessions, registry); ``async with registry.running():`` is the
    registry's life (at entry it kills what a dead predecessor's commands left in their
    cgroups under the state directory; at exit it ends every session)."""
    from ..processes import ProcessRegistry
    from ..tools.command_sessions import LocalSessions

    registry = ProcessRegistry(workspace, backends, records)  # type: ignore[arg-type]
    return LocalSessions(workspace, backends, registry), registry  # type: ignore[arg-type]


def services(workspace: WorkspaceView, backends: Backends, audit: NetworkAudit) -> list[Any]:
    """The plugins' services (``codespace_services``) for a process that runs the workspace's
    commands in the server's stead: ``async`` callables to run for the process's life, around
    its command registry, each supervised as the server supervises its own (a failure is
    logged and stops that service only). They serve the mechanisms this process holds (a
    warm sandbox helper, the egress proxy, whose decisions go to ``audit``); the server does
    not run them for a sandbox it does not use."""
    import functools

    from ..plugins import supervised

    found = backends._plugins.services(workspace, backends, audit)  # type: ignore[attr-defined]
    return [functools.partial(supervised, plugin, service) for plugin, service in found]

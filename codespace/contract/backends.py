"""The backends serving one workspace, as a plugin sees them, and the core's sandbox decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .files import FileSystem
    from .patches import Patcher
    from .sandbox import Sandbox, SandboxLayout
    from .commands import Terminal


@dataclass(frozen=True)
class SandboxDecision:
    """What the core decided for commands of a workspace: which sandbox confines them, to
    what, or why they run unsandboxed. Plugins read it; only the core makes it."""

    backend: Sandbox | None
    note: str | None
    """Why a command runs unsandboxed, when it does."""
    layout: SandboxLayout | None = None
    """What ``backend`` confines each command to."""


class Backends(Protocol):
    """The workspace's backends, each from the first plugin that provides it (see the
    ``codespace_*`` backend hooks). Passed to ``codespace_startup`` and ``codespace_services``."""

    def filesystem(self) -> FileSystem:
        """The file-system backend; raises :class:`BackendMissing` when no plugin provides one."""

    def patcher(self) -> Patcher:
        """The patch backend; raises :class:`BackendMissing` when no plugin provides one."""

    def terminal(self) -> Terminal:
        """The terminal backend; raises :class:`BackendMissing` when no plugin provides one."""

    def sandbox(self) -> Sandbox | None:
        """The sandbox backend, or None when no plugin provides one."""

    def workspace_tools_here(self) -> bool:
        """Do the tools that act on the workspace (files, patches, searches) run in this
        process? False in a server whose ``[runtime] worker`` runs them (a service that
        prepares for them, such as a search index, belongs in the worker then). Added in
        codespace 0.2.1."""

    def sandbox_decision(self) -> SandboxDecision:
        """The core's decision for this workspace's commands (policy ``[sandbox]`` against what
        the sandbox backend reports). Raises :class:`Refused` when the policy requires a
        sandbox that cannot run here."""

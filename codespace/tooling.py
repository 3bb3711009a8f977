"""How a tool is defined, what its handler receives, and the registry of tools.

Built-in tools and plugin tools use the same :class:`ToolDefinition`, registered
through the ``codespace_register_tools`` hook, and pass through the same gateway.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from .models import Strict
from .schemas import input_schema, output_schema

if TYPE_CHECKING:
    from .contract.backends import Backends
    from .contract.commands import CommandSessions
    from .processes import ProcessRegistry
    from .store import OperationStore
    from .workspace import Workspace

Need = Literal["read", "write"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class OperationArgs(Strict):
    """Arguments every side-effecting tool accepts."""


    operation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._:@/+=-]+$",
        description="Idempotency key. Retrying with the same key and arguments returns the stored result "
        "without running again; a new key (or none) runs it again.",
    )


@dataclass
class Needs:
    """What a call will touch, for the policy check. Paths may be relative to the
    workspace; the gateway normalises them."""

    read: list[str] = field(default_factory=list)
    write: list[str] = field(default_factory=list)
    write_through: list[str] = field(default_factory=list)
    """Writes that follow a final symbolic link to its target (checked where the link leads)."""
    argv: list[list[str]] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)


class PluginListing(Protocol):
    """The loaded plugins, as a tool may show them (``workspace_info``)."""

    def listing(self, *, include_builtin: bool = False) -> list[Any]: ...


@dataclass
class ToolCall:
    """What a handler gets besides its arguments."""

    tool: ToolDefinition
    workspace: Workspace
    backends: Backends
    plugins: PluginListing
    store: OperationStore
    processes: ProcessRegistry | None
    """This server's own registry (how its commands are tracked; empty when a worker owns them)."""
    operation_id: str | None
    client: str | None
    _progress: ProgressFn | None = None
    _sessions: Callable[[], CommandSessions | None] | None = None
    detached: bool = False
    cancel_note: str | None = None
    """Set by a handler that cleaned up after a cancellation: what the record's error says."""

    @property
    def sessions(self) -> CommandSessions | None:
        """Where the command tools' work is done: this server's registry or a worker's (found
        on first use: with a worker configured, that asks the runner plugin)."""
        return self._sessions() if self._sessions is not None else None

    def detach(self) -> None:
        """Leave the operation ``running`` after the handler returns: the work goes on
        (a command still running) and its owner finishes the record later. The
        handler's result is stored as the interim result a replay returns."""
        self.detached = True

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress to the client if it asked for it (a no-op otherwise)."""
        if self._progress is not None:
            await self._progress(done, total, message)


Handler = Callable[[ToolCall, Any], Awaitable[BaseModel]]


@dataclass(frozen=True)
class ToolDefinition:
    """One MCP tool.

    ``paths`` names the argument fields holding paths and the access each needs;
    the gateway normalises them to absolute paths and checks them before the
    handler runs. ``needs`` adds what only the arguments' content reveals (paths
    inside a patch, the argv of a command). A tool that is not ``read_only`` gets an
    operation record and must accept ``operation_id`` (subclass
    :class:`OperationArgs`).
    """

    name: str
    description: str
    arguments: type[BaseModel]
    result: type[BaseModel]
    handler: Handler
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False
    title: str | None = None
    paths: Mapping[str, Need] = field(default_factory=dict)
    needs: Callable[[Any, ToolCall], Needs] | None = None
    render: Callable[[Any], str] | None = None
    """Text shown to the agent on success (default: the structured result as JSON)."""
    runs_on_workspace: bool = False
    """The handler reads or changes the workspace itself (its own walker, a program run on the
    files), not only through the backends: with a worker configured, the worker runs it (the
    gateway still checks and records the call). Its result must survive a JSON round trip."""

    @property
    def side_effects(self) -> bool:
        return not self.read_only

    def validate_shape(self) -> str | None:
        """A problem with the definition itself, or None."""
        if not self.name or not self.name.replace("_", "").isalnum():
            return f"tool name {self.name!r} must be letters, digits and underscores"
        if not self.description.strip():
            return f"tool {self.name!r} has no description"
        if self.side_effects and "operation_id" not in self.arguments.model_fields:
            return f"tool {self.name!r} has side effects but its arguments lack operation_id (subclass OperationArgs)"
        for name in self.paths:
            if name not in self.arguments.model_fields:
                return f"tool {self.name!r} declares path field {name!r} that its arguments lack"
        return None

    def render_text(self, result: BaseModel, structured: dict[str, Any]) -> str:
        if self.render is not None:
            return self.render(result)
        return json.dumps(structured, ensure_ascii=False)


ToolRegistrar = Callable[[ToolDefinition], None]


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        self.owners: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []  # (plugin, message)
        self._listing: list[Any] | None = None

    def registrar_for(self, plugin: str) -> ToolRegistrar:
        def register(tool: ToolDefinition) -> None:
            problem = tool.validate_shape()
            if problem is None and tool.name in self._tools:
                problem = f"tool {tool.name!r} is already provided by {self.owners[tool.name]}; dropped"
            if problem is not None:
                self.problems.append((plugin, problem))
                return
            self._tools[tool.name] = tool
            self.owners[tool.name] = plugin
            self._listing = None

        return register

    def get(self, name: str) -> ToolDefinition | None:
        return self._tools.get(name)

    def __iter__(self):  # noqa: ANN204
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def mcp_tools(self) -> list[Any]:
        """The ``tools/list`` answer, built once."""
        if self._listing is None:
            import mcp_types as types

            self._listing = [_to_mcp(tool, types) for tool in sorted(self._tools.values(), key=lambda t: t.name)]
        return self._listing


def _to_mcp(tool: ToolDefinition, types: Any) -> Any:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=input_schema(tool.arguments),
        output_schema=output_schema(tool.result, side_effects=tool.side_effects),
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive if not tool.read_only else False,
            idempotent_hint=tool.idempotent or tool.read_only,
            open_world_hint=tool.open_world,
        ),
    )

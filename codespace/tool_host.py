"""Tools that act on the workspace themselves, run by a process that serves the workspace in
the server's stead (a worker).

Most tools reach the workspace only through the backends (files, patches, command sessions),
which a worker already serves. A plugin's tool whose handler reads or changes the workspace
itself (``ToolDefinition.runs_on_workspace``: a walker of its own, a helper program run on the
files) must run where the workspace is reachable: with a worker, the server's gateway checks
and records the call, then the worker runs the handler here, after judging the arguments again
by the same rules (its own policy, the tool's own path declarations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .contract import ToolError
from .gateway import Gateway, describe_validation_error
from .tooling import ToolCall, ToolDefinition, ToolRegistry

if TYPE_CHECKING:
    from .backends import Backends
    from .workspace import Workspace


class ToolHost:
    def __init__(self, workspace: Workspace, backends: Backends) -> None:
        self.workspace = workspace
        self.backends = backends
        self.plugins = backends._plugins  # the plugins the worker loaded for its backends
        self.registry = ToolRegistry()
        self.plugins.register_tools(self.registry)
        self.gateway = Gateway(workspace, self.registry, backends, self.plugins, store=None)  # type: ignore[arg-type]

    def prepare(self, name: str, params: dict, operation_id: str | None) -> tuple[ToolDefinition, ToolCall, BaseModel]:
        """The tool, its call and its arguments, judged; raises ToolError (or Refused) when it
        cannot run here. Nothing has run yet when it raises."""
        tool = self.registry.get(name)
        if tool is None or not tool.runs_on_workspace:
            served = ", ".join(sorted(t.name for t in self.registry if t.runs_on_workspace)) or "none"
            raise ToolError(f"the worker does not run tool {name!r} (it runs: {served})", code="unknown_tool")
        if "operation_id" in tool.arguments.model_fields:
            params = {**params, "operation_id": operation_id}
        try:
            args = tool.arguments.model_validate(params)
        except ValidationError as exc:
            raise ToolError(describe_validation_error(name, exc), code="invalid_arguments") from None
        call = ToolCall(tool=tool, workspace=self.workspace, backends=self.backends, plugins=self.plugins,
                        store=None, processes=None, operation_id=operation_id, client="worker")  # type: ignore[arg-type]
        return tool, call, self.gateway.judged(tool, args, call)

    async def run(self, prepared: tuple[ToolDefinition, ToolCall, BaseModel]) -> dict[str, Any]:
        tool, call, args = prepared
        result = await tool.handler(call, args)
        return result.model_dump(mode="json")

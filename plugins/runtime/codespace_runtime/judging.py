"""The worker's own policy check of each request: it never trusts that the server did it.

Paths are judged with the gateway's own functions (``codespace.contract.gate``) against the
policy the worker loaded itself; a refusal raises :class:`NotRun` (``dispatched: false``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codespace.contract import Refused, ToolError, gate

from .errors_wire import NotRun


class Judge:
    """The worker's own policy check of each request (never trusting that the server did it)."""

    def __init__(self, workspace: Any) -> None:
        self.workspace = workspace
        self.root = str(workspace.root)

    def path(self, value: object) -> str:
        if not isinstance(value, str):
            raise NotRun(Refused("path syntax", f"refused by the worker: a path must be a string, not {value!r}"))
        refusal = gate.path_syntax_refusal(value)
        if refusal is None and (not value.startswith("/") or gate.normalize(value, self.root) != value):
            refusal = Refused("path syntax", f"refused by the worker: {value!r} is not an absolute, normalised "
                              "path (the server sends paths it has resolved against the workspace root)")
        if refusal is not None:
            raise NotRun(refusal)
        return value

    def paths(self, *, read: tuple[str, ...] = (), write: tuple[str, ...] = (),
              write_through: tuple[str, ...] = ()) -> None:
        refusal = gate.paths_refusal(self.workspace.paths, read=[self.path(p) for p in read],
                                     write=[self.path(p) for p in write],
                                     write_through=[self.path(p) for p in write_through])
        if refusal is not None:
            raise NotRun(refusal)

    def request(self, request: Any, needs: Mapping[str, str]) -> None:
        read = tuple(getattr(request, f) for f, need in needs.items() if need == "read")
        write = tuple(getattr(request, f) for f, need in needs.items() if need == "write")
        self.paths(read=read, write=write)

    def command(self, args: Mapping[str, Any]) -> None:
        """``proc.exec``'s command (the ``[commands]`` rules) and its directory (readable)."""
        command = args.get("command")
        if not isinstance(command, (list, str)) or (isinstance(command, list) and
                                                     not all(isinstance(a, str) for a in command)):
            raise NotRun(ToolError("proc.exec refused by the worker: params.args.command must be an argv list of "
                                   "strings or a shell string", code="bad_params"))
        refusal = gate.command_refusal(self.workspace, command)
        if refusal is not None:
            raise NotRun(refusal)
        if args.get("cwd") is not None:
            self.paths(read=(args["cwd"],))

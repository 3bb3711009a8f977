"""The backends serving one workspace, obtained lazily through the plugin facade
(the contract's :class:`~codespace.contract.Backends`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import sandboxing
from .contract import BackendMissing

if TYPE_CHECKING:
    from .contract import FileSystem, Patcher, Sandbox, SandboxDecision, Terminal
    from .plugins import Plugins
    from .workspace import Workspace

_INSTALL_HINTS = {
    "filesystem": ("a file-system backend", "codespace-fs", "plugins/fs"),
    "patcher": ("a patch backend", "codespace-patch", "plugins/patch"),
    "terminal": ("a terminal backend (tty: true)", "codespace-pty", "plugins/pty"),
    "sandbox": ("a sandbox backend", "codespace-linux-sandbox", "plugins/linux_sandbox"),
}


class Backends:
    def __init__(self, plugins: Plugins, workspace: Workspace) -> None:
        self._plugins = plugins
        self._workspace = workspace
        self._cache: dict[str, tuple[Any, str | None]] = {}

    def _get(self, kind: str) -> tuple[Any, str | None]:
        if kind not in self._cache:
            self._cache[kind] = getattr(self._plugins, kind)(self._workspace)
        return self._cache[kind]

    def _require(self, kind: str) -> Any:
        backend, _ = self._get(kind)
        if backend is None:
            what, dist, path = _INSTALL_HINTS[kind]
            raise BackendMissing(
                f"no plugin provides {what}; install {dist} (pip install ./{path} from the CodeSpace "
                "repository) and restart the server, or check `codespace plugins` for a plugin that failed to load",
                details={"backend": kind, "distribution": dist},
            )
        return backend

    def filesystem(self) -> FileSystem:
        return self._require("filesystem")

    def patcher(self) -> Patcher:
        return self._require("patcher")

    def terminal(self) -> Terminal:
        return self._require("terminal")

    def sandbox(self) -> Sandbox | None:
        return self._get("sandbox")[0]

    def sandbox_decision(self) -> SandboxDecision:
        return sandboxing.decide(self._workspace, self)

    def providers(self) -> dict[str, str | None]:
        """Which plugin serves each backend (None: nobody)."""
        return {kind: self._get(kind)[1] for kind in _INSTALL_HINTS}

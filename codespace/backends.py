"""The backends serving one workspace, obtained lazily through the plugin facade
(the contract's :class:`~codespace.contract.Backends`).

With ``[runtime] worker`` other than ``"off"`` the core asks ``codespace_runner`` once per
workspace for backends that forward to a worker process, and hands those out instead; None
from the plugin means in-process (the worker process itself is told it is the runner). With
no plugin implementing the hook every file call is refused with what to install (running
in-process instead would silently drop the isolation the operator asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import sandboxing
from .contract import BackendMissing

if TYPE_CHECKING:
    from .contract import CommandSessions, SessionRecords, FileSystem, Patcher, Sandbox, SandboxDecision, Terminal
    from .plugins import Plugins
    from .workspace import Workspace

_INSTALL_HINTS = {
    "filesystem": ("a file-system backend", "codespace-fs", "plugins/fs"),
    "patcher": ("a patch backend", "codespace-patch", "plugins/patch"),
    "terminal": ("a terminal backend (tty: true)", "codespace-pty", "plugins/pty"),
    "sandbox": ("a sandbox backend", "codespace-linux-sandbox", "plugins/linux_sandbox"),
}


class Backends:
    def __init__(self, plugins: Plugins, workspace: Workspace, *, records: SessionRecords | None = None,
                 _shared: Backends | None = None) -> None:
        self._plugins = plugins
        self._workspace = workspace
        self._cache: dict[str, tuple[Any, str | None]] = {} if _shared is None else _shared._cache
        self._forwarding = _shared is None
        self._runner: tuple[Any, str | None] | None = None
        self.records = records if _shared is None else _shared.records
        """The store's side of command sessions, handed to a runner that owns them."""

    def in_process(self) -> Backends:
        """The same backends, never forwarded to a worker (what the runner is handed as
        ``local``, and what start-up recovery uses: it runs before any worker serves)."""
        return Backends(self._plugins, self._workspace, _shared=self)

    def _remote(self) -> Any:
        """The runner's backends, or None when side effects run in this process."""
        if not self._forwarding:
            return None
        mode = self._workspace.policy.runtime.worker
        if mode == "off":
            return None
        if self._runner is None:  # asked once per workspace
            self._runner = self._plugins.runner(self._workspace, self.in_process())
        runner, _ = self._runner
        if runner is None and not self._plugins.implements("codespace_runner"):
            raise BackendMissing(
                f"the policy sets runtime.worker = {mode!r} but no plugin provides a worker; install "
                "codespace-runtime (pip install ./plugins/runtime from the CodeSpace repository) and restart the "
                "server, or set runtime.worker = \"off\" to run file operations in the server",
                details={"backend": "runner", "distribution": "codespace-runtime", "rule": "runtime.worker"},
            )
        return runner  # None from a plugin that implements the hook: in-process (e.g. inside the worker)

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
        remote = self._remote()
        return remote.filesystem() if remote is not None else self._require("filesystem")

    def patcher(self) -> Patcher:
        remote = self._remote()
        return remote.patcher() if remote is not None else self._require("patcher")

    def terminal(self) -> Terminal:
        return self._require("terminal")

    def sessions(self, local: CommandSessions) -> CommandSessions:
        """Where command sessions live: the runner's, when it serves them (``sessions(records)``
        on the runner's backends), else ``local`` (this server's registry)."""
        remote = self._remote()
        serve = getattr(remote, "sessions", None)
        return local if serve is None else serve(self.records)

    def tool_runner(self) -> Any:
        """The runner that runs ``runs_on_workspace`` tools (``run_tool(name, params,
        operation_id)``), or None: they run here."""
        remote = self._remote()
        return remote if callable(getattr(remote, "run_tool", None)) else None

    def workspace_tools_here(self) -> bool:
        try:
            return self.tool_runner() is None
        except BackendMissing:  # a worker is configured and none can be had: they run nowhere
            return False

    def commands_remote(self) -> bool:
        """Do commands run in a worker (so this server's own registry stays idle)?"""
        try:
            return getattr(self._remote(), "sessions", None) is not None
        except BackendMissing:
            return False

    def for_services(self) -> Backends:
        """The backends this process's plugin services are given: all of them, except that a
        server whose commands run in a worker has no sandbox (the worker runs the sandbox's
        services for its own: a warm helper or an egress proxy here would serve nothing, and a
        sweep of the state directory's placeholders would race the worker's commands)."""
        return _WithoutSandbox(self) if self.commands_remote() else self

    def sandbox(self) -> Sandbox | None:
        return self._get("sandbox")[0]

    def sandbox_decision(self) -> SandboxDecision:
        return sandboxing.decide(self._workspace, self)

    def runtime(self) -> dict[str, Any]:
        """Where side effects run, for ``workspace_info`` and ``codespace doctor``: the
        runner's own status when a worker is configured, else the server's."""
        mode = self._workspace.policy.runtime.worker
        if mode == "off" or not self._forwarding:
            return {"worker": "off", "serving": False, "serves": [], "commands": "server"}
        try:
            remote = self._remote()
        except BackendMissing as exc:
            return {"worker": mode, "serving": False, "serves": [], "commands": "server", "problem": exc.message}
        if remote is None:
            return {"worker": mode, "serving": False, "serves": [], "commands": "server", "in_worker": True}
        status = getattr(remote, "status", None)
        found = status() if callable(status) else {}
        return {"worker": mode, "serving": False, "commands": "server", **found, "plugin": self._runner[1]}

    def providers(self) -> dict[str, str | None]:
        """Which plugin serves each backend (None: nobody)."""
        return {kind: self._get(kind)[1] for kind in _INSTALL_HINTS}


class _WithoutSandbox:
    """:meth:`Backends.for_services` in a server whose commands run in a worker."""

    def __init__(self, backends: Backends) -> None:
        self._backends = backends

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backends, name)

    def sandbox(self) -> None:
        return None

"""Plugin loading and the typed facade over the hooks.

Plugins come from the entry-point group ``codespace.plugins``. Each is loaded on
its own: one that fails to import, registers an unknown hook or raises in a hook
is reported with its error and the others carry on. ``CODESPACE_PLUGINS_BLOCK`` /
``CODESPACE_PLUGINS_ALLOW`` (comma-separated names) and the policy's ``[plugins]``
table choose which load. Built-in tool modules register through the same hooks,
so the contract is exercised by the core itself.

Nothing outside this module calls ``pm.hook``.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pluggy

from . import hookspecs
from .contract import markers

if TYPE_CHECKING:
    from importlib.metadata import Distribution, EntryPoint

    from .contract import Backends, Check, FileSystem, Patcher, PinCheck, Sandbox, Terminal
    from .tooling import ToolRegistry
    from .workspace import Workspace

log = logging.getLogger(__name__)

PROJECT = "codespace"
ENTRY_POINT_GROUP = "codespace.plugins"
ENV_BLOCK = "CODESPACE_PLUGINS_BLOCK"
ENV_ALLOW = "CODESPACE_PLUGINS_ALLOW"

hookimpl = markers.hookimpl  # pluggy's mark, set without pluggy (a helper loads plugins without it)

# Core features implemented as plugins of the same contract.
BUILTIN_PLUGINS = (
    "codespace.tools.workspace_info",
    "codespace.tools.operations",
    "codespace.tools.files",
    "codespace.tools.patch",
    "codespace.tools.commands",
)

_UPSTREAM_URL = re.compile(r"^https://github\.com/(?P<project>[^/]+/[^/]+)/tree/(?P<release>[^/\s]+)")


@dataclass(frozen=True)
class Pin:
    """The upstream release a plugin follows, from its package metadata
    (``[project.urls]`` entries labelled ``upstream`` and ``upstream <component>``)."""

    project: str
    release: str
    components: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = f" ({', '.join(self.components)})" if self.components else ""
        return f"{self.project} {self.release}{parts}"


Status = Literal["builtin", "loaded", "blocked", "failed"]


@dataclass
class PluginInfo:
    name: str
    status: Status
    entry: EntryPoint | None = None  # where it was found; None for a builtin
    hooks: list[str] = field(default_factory=list)
    error: str | None = None

    # Read from the package metadata only when shown: parsing every plugin's METADATA
    # at start-up cost 4 ms of the server's ready time, importlib.metadata itself 18.
    @functools.cached_property
    def dist(self) -> Distribution | None:
        return None if self.entry is None else self.entry.dist

    @functools.cached_property
    def distribution(self) -> str | None:
        return None if self.dist is None else self.dist.name

    @functools.cached_property
    def version(self) -> str | None:
        return None if self.dist is None else self.dist.version

    @functools.cached_property
    def pin(self) -> Pin | None:
        return None if self.dist is None else pin_from_metadata(self.dist.metadata.get_all("Project-URL") or [])

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "distribution": self.distribution,
            "version": self.version,
            "pin": None if self.pin is None else {
                "project": self.pin.project, "release": self.pin.release, "components": list(self.pin.components)
            },
            "hooks": self.hooks,
            "error": self.error,
        }


def pin_from_metadata(project_urls: Iterable[str]) -> Pin | None:
    project = release = None
    components: list[str] = []
    for entry in project_urls:
        label, _, url = entry.partition(",")
        label, url = label.strip(), url.strip()
        if not label.lower().startswith("upstream"):
            continue
        match = _UPSTREAM_URL.match(url)
        if not match:
            continue
        if label.lower() == "upstream":
            project, release = match["project"], match["release"]
        else:
            components.append(label[len("upstream"):].strip())
            project = project or match["project"]
            release = release or match["release"]
    if project is None or release is None:
        return None
    return Pin(project, release, tuple(components))


def _names(value: str | None) -> set[str]:
    return {n.strip() for n in (value or "").split(",") if n.strip()}


def _short_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def supervised(plugin: str, service: Callable[[], Any]) -> None:
    """Run one plugin's service (``codespace_services``): its failure is logged and stops
    that service only; cancellation (the process stopping) passes through."""
    import anyio

    try:
        await service()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception:
        logging.getLogger(__name__).exception("service of plugin %s failed and stopped", plugin)


class Plugins:
    """The plugin manager and the one place hooks are called."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}

    # -- loading -------------------------------------------------------------

    @classmethod
    def load(
        cls,
        *,
        allow: Iterable[str] | None = None,
        block: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        discovered: Iterable[EntryPoint] | None = None,
        builtins: Iterable[str] = BUILTIN_PLUGINS,
    ) -> Plugins:
        env = os.environ if env is None else env
        blocked = set(block) | _names(env.get(ENV_BLOCK))
        allowed: set[str] | None = None
        if allow is not None:
            allowed = set(allow)
        if env.get(ENV_ALLOW):
            env_allow = _names(env.get(ENV_ALLOW))
            allowed = env_allow if allowed is None else allowed & env_allow
        plugins = cls()
        for module_name in builtins:
            plugins._register_builtin(module_name)
        if discovered is None:
            # The entry points read without importlib.metadata where they can be (about 18 ms of
            # a start without a kept tool listing), which is asked otherwise.
            from .contract.installed import discovered as read_entry_points

            discovered = read_entry_points(ENTRY_POINT_GROUP)
        if discovered is None:
            from importlib.metadata import entry_points

            discovered = entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(discovered, key=lambda e: e.name):
            if ep.name in plugins.infos:
                log.warning("plugin name %s is provided twice; the second is ignored", ep.name)
                continue
            info = PluginInfo(ep.name, "loaded", entry=ep)
            plugins.infos[ep.name] = info
            if ep.name in blocked or (allowed is not None and ep.name not in allowed):
                info.status = "blocked"
                continue
            plugins._register_entry_point(ep, info)
        return plugins

    def _register_builtin(self, module_name: str) -> None:
        module = importlib.import_module(module_name)
        self.pm.register(module, name=module_name)
        self.infos[module_name] = PluginInfo(module_name, "builtin", hooks=self._hook_names(module))

    def _register_entry_point(self, ep: EntryPoint, info: PluginInfo) -> None:
        try:
            plugin = ep.load()
        except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything, even SystemExit
            self._fail(info, f"import failed: {_short_error(exc)}", exc)
            return
        try:
            self.pm.register(plugin, name=ep.name)
        except Exception as exc:  # pluggy.PluginValidationError and friends
            self._fail(info, f"registration failed: {_short_error(exc)}", exc)
            return
        unknown = [hc.name for hc in self.pm.get_hookcallers(plugin) or [] if hc.spec is None]
        if unknown:
            self.pm.unregister(plugin)
            known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("codespace_")))
            self._fail(info, f"implements unknown hook(s) {', '.join(unknown)}; known hooks: {known}", None)
            return
        info.hooks = self._hook_names(plugin)

    def _fail(self, info: PluginInfo, message: str, exc: BaseException | None) -> None:
        info.status = "failed"
        info.error = message
        detail = "".join(traceback.format_exception(exc)) if exc is not None else ""
        log.error("plugin %s: %s\n%s", info.name, message, detail)

    def _hook_names(self, plugin: object) -> list[str]:
        return sorted(hc.name for hc in self.pm.get_hookcallers(plugin) or [])

    # -- calling ---------------------------------------------------------------

    def _impls(self, hook_name: str) -> list[tuple[str, Callable[..., Any]]]:
        """(plugin, call) pairs in pluggy's order (most recently registered first); each
        call passes an implementation only the arguments it declares, as pluggy does."""
        caller = getattr(self.pm.hook, hook_name)

        def bind(impl: Any) -> Callable[..., Any]:
            return lambda **kwargs: impl.function(**{name: kwargs[name] for name in impl.argnames})

        return [(impl.plugin_name, bind(impl)) for impl in reversed(caller.get_hookimpls())]

    def _hook_failed(self, plugin: str, hook: str, exc: BaseException) -> None:
        info = self.infos.get(plugin)
        message = f"hook {hook} raised {_short_error(exc)}"
        if info is not None and info.error is None:
            info.error = message
        log.error("plugin %s: %s\n%s", plugin, message, "".join(traceback.format_exception(exc)))

    def _first(self, hook: str, workspace: Workspace) -> tuple[Any, str | None]:
        for plugin, fn in self._impls(hook):
            try:
                result = fn(workspace=workspace)
            except Exception as exc:
                self._hook_failed(plugin, hook, exc)
                continue
            if result is not None:
                return result, plugin
        return None, None

    def filesystem(self, workspace: Workspace) -> tuple[FileSystem | None, str | None]:
        return self._first("codespace_filesystem", workspace)

    def patcher(self, workspace: Workspace) -> tuple[Patcher | None, str | None]:
        return self._first("codespace_patcher", workspace)

    def terminal(self, workspace: Workspace) -> tuple[Terminal | None, str | None]:
        return self._first("codespace_terminal", workspace)

    def sandbox(self, workspace: Workspace) -> tuple[Sandbox | None, str | None]:
        return self._first("codespace_sandbox", workspace)

    def implements(self, hook: str) -> bool:
        """Does any loaded plugin implement ``hook``?"""
        return bool(self._impls(hook))

    def runner(self, workspace: Workspace, local: Backends) -> tuple[Backends | None, str | None]:
        for plugin, fn in self._impls("codespace_runner"):
            try:
                result = fn(workspace=workspace, local=local)
            except Exception as exc:
                self._hook_failed(plugin, "codespace_runner", exc)
                continue
            if result is not None:
                return result, plugin
        return None, None

    def register_tools(self, registry: ToolRegistry) -> None:
        # Built-in tools register first, so no plugin can take over a core tool's name.
        impls = sorted(self._impls("codespace_register_tools"), key=lambda item: item[0] not in BUILTIN_PLUGINS)
        for plugin, fn in impls:
            try:
                fn(register=registry.registrar_for(plugin))
            except Exception as exc:
                self._hook_failed(plugin, "codespace_register_tools", exc)
        for plugin, problem in registry.problems:
            info = self.infos.get(plugin)
            if info is not None and info.error is None:
                info.error = problem
            log.error("plugin %s: %s", plugin, problem)

    def startup(self, workspace: Workspace, backends: Backends) -> None:
        for plugin, fn in self._impls("codespace_startup"):
            try:
                fn(workspace=workspace, backends=backends)
            except Exception as exc:
                self._hook_failed(plugin, "codespace_startup", exc)

    def services(self, workspace: Workspace, backends: Backends, store: Any) -> list[tuple[str, Callable[[], Any]]]:
        found: list[tuple[str, Callable[[], Any]]] = []
        for plugin, fn in self._impls("codespace_services"):
            try:
                found.extend((plugin, service) for service in fn(workspace=workspace, backends=backends, store=store) or [])
            except Exception as exc:
                self._hook_failed(plugin, "codespace_services", exc)
        return found

    def doctor(self, workspace: Workspace) -> list[Check]:
        from .contract.checks import Check

        checks: list[Check] = []
        for plugin, fn in self._impls("codespace_doctor"):
            try:
                checks.extend(fn(workspace=workspace) or [])
            except Exception as exc:
                self._hook_failed(plugin, "codespace_doctor", exc)
                checks.append(Check(f"plugin {plugin}", False, f"doctor hook raised {_short_error(exc)}", "report it"))
        return checks

    def pin_checks(self) -> list[tuple[str, PinCheck]]:
        found: list[tuple[str, PinCheck]] = []
        for plugin, fn in self._impls("codespace_pin_checks"):
            try:
                found.extend((plugin, check) for check in fn() or [])
            except Exception as exc:
                self._hook_failed(plugin, "codespace_pin_checks", exc)
        return found

    # -- listing ---------------------------------------------------------------

    def listing(self, *, include_builtin: bool = False) -> list[PluginInfo]:
        return [i for i in self.infos.values() if include_builtin or i.status != "builtin"]

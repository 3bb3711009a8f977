"""The file-system backend a one-shot helper uses, chosen as the plugin manager would,
without loading it.

A helper is handed the installed plugins by the process that started it (the patch
helper by ``codespace_patch.spawn``). Loading pluggy, the hook specifications and the
plugin manager to pick one backend cost it a third of the released binary's whole run.
This module makes the same choice for the plain case: the allowed plugins imported in
name order, each a module whose marked hook functions carry no ordering or wrapper
option and declare only arguments of their hook's specification; the
``codespace_filesystem`` implementations called last registered first, the first
answer other than None taken. That is the order and the checks of
``codespace.plugins.Plugins`` over pluggy (a test compares the two over the same
plugins). Anything outside the plain case (a name given twice, a plugin that fails to
import or that pluggy would refuse, a hook with options, a hook that raises) answers
:data:`NOT_PLAIN`, and the caller takes the plugin manager's road, which reports it
as a server would.

A helper need not even import the plugins that offer no file system: a process that has
them loaded (:func:`filesystem_suppliers`) can tell which could take part in the choice,
and a one-shot helper keeps that answer while the files it was judged by are unchanged
(:func:`suppliers_to_keep`, :func:`kept_suppliers`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs a helper more than this module

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from .workspace import WorkspaceView

# types.FunctionType, MethodType and ModuleType, as the types module defines them: importing
# it cost the patch helper a third of a millisecond, about what its whole gate costs.
def _function() -> None: ...


class _Method:
    def method(self) -> None: ...


FunctionType = type(_function)
MethodType = type(_Method().method)
ModuleType = type(sys)

NOT_PLAIN = object()
"""The choice needs the plugin manager."""

STATIC_HOOKS = "CODESPACE_STATIC_HOOKS"
"""A hook module sets this to True to declare that which hooks it has depends only on the
files of its own package (no hook defined under a condition, such as an optional import
or an environment variable): a one-shot helper may then keep which hooks it has
(:func:`filesystem_suppliers`) while those files are unchanged."""

ENV_BLOCK = "CODESPACE_PLUGINS_BLOCK"
ENV_ALLOW = "CODESPACE_PLUGINS_ALLOW"
MARK = "codespace_impl"

# Every hook of codespace.hookspecs and the arguments its specification declares (a test
# compares this with what pluggy reads from the specifications). A marked function whose
# name is not here takes the plugin manager's road.
HOOK_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "codespace_startup": ("workspace", "backends"),
    "codespace_services": ("workspace", "backends", "store"),
    "codespace_doctor": ("workspace",),
    "codespace_pin_checks": (),
    "codespace_filesystem": ("workspace",),
    "codespace_patcher": ("workspace",),
    "codespace_terminal": ("workspace",),
    "codespace_sandbox": ("workspace",),
    "codespace_runner": ("workspace", "local"),
    "codespace_register_tools": ("register",),
}
_OPTIONS = ("wrapper", "hookwrapper", "tryfirst", "trylast", "specname")


def _names(value: str | None) -> set[str]:
    return {n.strip() for n in (value or "").split(",") if n.strip()}


def selected(
    names: Iterable[str], allow: Iterable[str] | None, block: Iterable[str], env: Mapping[str, str]
) -> list[str]:
    """The names that load, in loading order, by the policy's lists and the environment's,
    as ``Plugins.load`` combines them (each name once: a caller checks duplicates)."""
    blocked = set(block) | _names(env.get(ENV_BLOCK))
    allowed = None if allow is None else set(allow)
    if env.get(ENV_ALLOW):
        env_allow = _names(env.get(ENV_ALLOW))
        allowed = env_allow if allowed is None else allowed & env_allow
    return [n for n in sorted(names) if n not in blocked and (allowed is None or n in allowed)]


def _argnames(function: FunctionType) -> tuple[str, ...] | None:
    """The arguments pluggy would call ``function`` with, or None when telling them needs
    ``inspect`` (a wrapped function, a method's ``self``)."""
    if "." in function.__qualname__ or "__wrapped__" in function.__dict__ or "__signature__" in function.__dict__:
        return None
    code = function.__code__
    names = code.co_varnames[:code.co_argcount]
    return names[: len(names) - len(function.__defaults__ or ())]


def plain_hooks(module: object) -> dict[str, tuple[Callable[..., object], tuple[str, ...]]] | None:
    """Hook name -> (function, its arguments) of a plugin module, or None when pluggy's
    registration could differ from this reading (or would refuse the plugin)."""
    if type(module) is not ModuleType or "__dir__" in vars(module):
        return None
    found: dict[str, tuple[Callable[..., object], tuple[str, ...]]] = {}
    for name, value in vars(module).items():
        kind = type(value)
        if kind in (staticmethod, classmethod, MethodType):
            if getattr(value, MARK, None) is not None or getattr(value.__func__, MARK, None) is not None:
                return None
            continue
        if kind is not FunctionType:
            continue
        opts = value.__dict__.get(MARK)
        if not isinstance(opts, dict):
            continue
        spec = HOOK_ARGUMENTS.get(name)
        arguments = _argnames(value)
        if any(opts.get(option) for option in _OPTIONS) or spec is None or arguments is None:
            return None
        if not set(arguments) <= set(spec):
            return None
        found[name] = (value, arguments)
    return found


def plain_filesystem(
    workspace: WorkspaceView, installed: Iterable[object], *, allow: Iterable[str] | None, block: Iterable[str],
    env: Mapping[str, str] | None = None,
) -> object:
    """The FileSystem backend the plugin manager would choose among ``installed`` (objects
    with ``name`` and ``load()``, as ``codespace.contract.gate.InstalledPlugin``), None
    when no plugin offers one, or :data:`NOT_PLAIN`."""
    entries = {}
    for entry in installed:
        if entry.name in entries:  # type: ignore[attr-defined]
            return NOT_PLAIN
        entries[entry.name] = entry  # type: ignore[attr-defined]
    implementations = []
    modules: set[int] = set()
    for name in selected(entries, allow, block, os.environ if env is None else env):
        try:
            module = entries[name].load()  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001 - the plugin manager's road reports it, as a server would
            return NOT_PLAIN
        hooks = plain_hooks(module)
        if hooks is None or id(module) in modules:
            return NOT_PLAIN
        modules.add(id(module))
        if "codespace_filesystem" in hooks:
            implementations.append(hooks["codespace_filesystem"])
    arguments = {"workspace": workspace}
    for function, names in reversed(implementations):
        try:
            backend = function(**{n: arguments[n] for n in names})
        except Exception:  # noqa: BLE001 - as above
            return NOT_PLAIN
        if backend is not None:
            return backend
    return None


def filesystem_suppliers(installed: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """``installed`` split for a helper's later choice: the entries the file-system choice
    can depend on, and the module files the others were judged by.

    An entry is left out only when its module is already loaded in this process, declares
    :data:`STATIC_HOOKS`, reads plainly (:func:`plain_hooks`) and has no
    ``codespace_filesystem`` hook: it answers nothing to that hook and cannot send the
    choice to the plugin manager's road, so :func:`plain_filesystem` over what is left
    makes the same choice. Everything else stays: a name given twice, a value naming an
    attribute, a module not loaded here (nothing is imported for this: a server must not
    load a plugin its policy blocks), a module that does not declare its hooks static
    (found by testing from outside: a hook defined only when an optional module imports
    appeared with that module, and a kept answer missed it). The files are those of every
    loaded module of a left-out plugin's top-level package, and their directories (a
    module added there): what a static module's hooks can change with."""
    entries = list(installed)
    counts: dict[str, int] = {}
    for name, _ in entries:
        counts[name] = counts.get(name, 0) + 1
    kept: list[tuple[str, str]] = []
    packages: set[str] = set()
    for name, value in entries:
        module = sys.modules.get(value.strip()) if counts[name] == 1 and ":" not in value else None
        hooks = plain_hooks(module) if getattr(module, STATIC_HOOKS, False) is True else None
        if hooks is None or "codespace_filesystem" in hooks:
            kept.append((name, value))
        else:
            packages.add(value.strip().partition(".")[0])
    files = {
        file for name, module in list(sys.modules.items())
        if name.partition(".")[0] in packages and isinstance(file := getattr(module, "__file__", None), str)
    }
    return kept, sorted(files | {os.path.dirname(file) for file in files})


def suppliers_to_keep(installed: Iterable[tuple[str, str]]) -> tuple | None:
    """A record of :func:`filesystem_suppliers` for a one-shot process to keep until
    :func:`kept_suppliers` finds a change; None when there is nothing to leave out, or a
    file it was judged by changed too recently to tell (as :func:`.installed.scan_to_keep`).
    Only strings, ints, tuples and None (``marshal`` can write it)."""
    import time

    from .installed import SETTLED_NS, file_stamp

    entries = tuple((name, value) for name, value in installed)
    kept, files = filesystem_suppliers(entries)
    if len(kept) == len(entries):
        return None
    stamps = tuple((file, file_stamp(file)) for file in files)
    if any(stamp is None or stamp[0] > time.time_ns() - SETTLED_NS for _, stamp in stamps):
        return None
    return entries, tuple(kept), stamps


def kept_suppliers(record: object, installed: Iterable[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """The suppliers in a record of :func:`suppliers_to_keep` made for the same ``installed``
    while none of the files it was judged by has changed, else None (so is anything not
    such a record)."""
    from .installed import unchanged_pairs

    try:
        entries, kept, stamps = record  # type: ignore[misc]
        if entries != tuple((name, value) for name, value in installed):
            return None
        return unchanged_pairs(kept, stamps)
    except (TypeError, ValueError):
        return None

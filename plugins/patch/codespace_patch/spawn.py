"""How to start the helper executable as a separate, minimal process.

``sys.executable -I -S`` skips ``site`` (and every ``.pth`` file) and ignores
``PYTHON*`` variables: the fastest interpreter start-up, and nothing from the
agent's environment steers the import path. The price is that the helper's
packages must be put on ``sys.path`` explicitly: this module computes that list
from the current process (including editable installs, whose finders live in
``.pth`` files that ``-S`` skips). It hands over the installed plugins too, which
the helper would otherwise find by loading importlib.metadata and scanning every
distribution; the core still chooses among them, as the server does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable
from functools import lru_cache

# The helper's packages go after the interpreter's own directories, as site-packages
# would: each standard-library import then finds its module on the first try. Its own
# modules come from one file when they can (code_cache). The helper leaves with exit_now
# (no interpreter teardown). The cyclic garbage collector
# is off: in a process that lives for one patch it only walked the objects the imports
# and the parse made (1-1.5 ms of a 25 ms run, measured), and what it could free
# (reference cycles, which the patch code does not make) is bounded by the patch and
# file size limits and goes back with the process.
_BOOT = (
    "import gc;gc.disable();import sys;sys.path+={paths!r};from codespace_patch.code_cache import install;install();"
    "from codespace_patch.cli import exit_now, main;exit_now(main(plugins={plugins!r}))"
)
ENTRY_POINT_GROUP = "codespace.plugins"


def _package_root(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))
    if spec.origin:
        return os.path.dirname(os.path.abspath(spec.origin))
    return None


@lru_cache(maxsize=8)
def _plugins(extra: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(name, entry point value) of every plugin the helper would find on its path:
    those installed below ``extra`` first, as they come first there."""
    from importlib.metadata import distributions, entry_points

    found: dict[str, str] = {}
    below_extra = [ep for dist in distributions(path=[os.path.abspath(p) for p in extra]) for ep in dist.entry_points]
    for ep in [*below_extra, *entry_points(group=ENTRY_POINT_GROUP)]:
        if ep.group == ENTRY_POINT_GROUP:
            found.setdefault(ep.name, ep.value)
    return tuple(sorted(found.items()))


@lru_cache(maxsize=8)
def _paths(extra: tuple[str, ...]) -> tuple[str, ...]:
    names = {"codespace", "codespace_patch"}
    names |= {value.split(":")[0].split(".")[0] for _, value in _plugins(extra)}
    paths: list[str] = [os.path.abspath(p) for p in extra]
    for name in sorted(names):
        root = _package_root(name)
        if root is not None and root not in paths:
            paths.append(root)
    for entry in sys.path:
        if entry and os.path.isabs(entry) and entry not in paths:
            paths.append(entry)
    return tuple(paths)


def helper_command(extra_paths: Iterable[str] = ()) -> list[str]:
    """argv prefix for the helper; append the patch (or nothing, to pass it on stdin)."""
    extra = tuple(extra_paths)
    boot = _BOOT.format(paths=list(_paths(extra)), plugins=list(_plugins(extra)))
    return [sys.executable, "-I", "-S", "-c", boot]

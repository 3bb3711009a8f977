"""How to start the helper executable as a separate, minimal process.

``sys.executable -I -S`` skips ``site`` (and every ``.pth`` file) and ignores
``PYTHON*`` variables: the fastest interpreter start-up, and nothing from the
agent's environment steers the import path. The price is that the helper's
packages must be put on ``sys.path`` explicitly: this module computes that list
from the current process (including editable installs, whose finders live in
``.pth`` files that ``-S`` skips).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable
from functools import lru_cache

_BOOT = "import sys;sys.path[:0]={paths!r};from codespace_patch.cli import main;sys.exit(main())"


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
def _paths(extra: tuple[str, ...]) -> tuple[str, ...]:
    from importlib.metadata import entry_points

    names = {"codespace", "codespace_patch"}
    names |= {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="codespace.plugins")}
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
    paths = _paths(tuple(extra_paths))
    return [sys.executable, "-I", "-S", "-c", _BOOT.format(paths=list(paths))]

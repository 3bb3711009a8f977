"""The ignore files above a walked directory, up to the repository top, as git applies them.

The walk reads each directory's own ``.gitignore`` as it goes; these are the ones
it would not meet: those of the directories between the repository top (the
nearest directory holding ``.git``) and the walked one, and ``.git/info/exclude``.
Each is opened beneath a confined fd without following links.
"""

from __future__ import annotations

import os

from codespace.contract import FsError

from . import ignore
from .names import join
from .resolve import O_CLOEXEC, O_DIR, O_NOFOLLOW, Confinement


def ancestor_scopes(conf: Confinement, path: str, budget: ignore.PatternBudget | None = None) -> tuple[ignore.Scope, ...]:
    """Ignore files above the walked directory, up to the repository top (the
    nearest directory holding ``.git``), as git applies them; lowest precedence
    first. ``budget``: the walk's, which these spend first."""
    root = conf.root_for(path)
    rel = root.rel(path)
    parts = rel.split("/") if rel else []
    chain = [root.join("/".join(parts[:i])) for i in range(len(parts) + 1)]  # root .. path
    root.close()
    opened: list[tuple[int, int]] = []  # (index in chain, fd), nearest first
    try:
        top = None
        for i in range(len(chain) - 1, -1, -1):
            try:
                fd = conf.open(chain[i], os.O_RDONLY | O_DIR, need="read", follow_last=True, action="walk").fd
            except FsError:
                break
            opened.append((i, fd))
            try:
                os.stat(".git", dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            top = i
            break
        if top is None:
            return ()
        scopes: list[ignore.Scope] = []
        for i, fd in reversed(opened):
            below = "/".join(parts[i:])
            pre = below + "/" if below else ""
            if i == top:
                spec = _load_below(fd, (".git", "info"), "exclude", join(chain[i], ".git/info/exclude"), budget)
                if spec is not None:
                    scopes.append(ignore.Scope(0, pre, spec))
            if i < len(chain) - 1:  # the walked directory's own file is read by the walk
                spec = ignore.load_at(fd, ".gitignore", join(chain[i], ".gitignore"), budget)
                if spec is not None:
                    scopes.append(ignore.Scope(0, pre, spec))
        return tuple(scopes)
    finally:
        for _, fd in opened:
            os.close(fd)


def _load_below(fd: int, dirs: tuple[str, ...], name: str, shown: str,  # noqa: ANN202
                budget: ignore.PatternBudget | None = None):
    """An ignore file some directories below ``fd``, each opened without following links."""
    held: list[int] = []
    try:
        cur = fd
        for d in dirs:
            cur = os.open(d, os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC, dir_fd=cur)
            held.append(cur)
        return ignore.load_at(cur, name, shown, budget)
    except OSError:
        return None
    finally:
        for h in held:
            os.close(h)

"""Ignore files as Codex's file search applies them: ``.ignore`` everywhere, ``.gitignore``
only inside a git repository (a ``.git`` in the directory or an ancestor), deeper files
and ``.ignore`` over ``.gitignore`` in the same directory, ``!`` re-including."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pathspec

from codespace.contract import glob_too_costly, guard_globs

log = logging.getLogger(__name__)

MAX_IGNORE_BYTES = 1 << 20  # an ignore file larger than this is not read (it would only cost time)
MAX_WALK_PATTERNS = 2_000
"""Ignore patterns one walk compiles, over all its ignore files; a file past that is not read
either. pathspec makes a regular expression of each pattern in the server (0.5 ms apiece for
``dir1/**/*.x1``) and tries each on every entry below it: two 1 MiB ignore files of 48,678
patterns, which any command can write, kept one find_files busy for 50 s, past its own 10 s
bound. Real ignore files hold tens to hundreds."""


class PatternBudget:
    """What one walk may still compile."""

    def __init__(self, patterns: int = MAX_WALK_PATTERNS, *, refuse_hardlinks: bool = False) -> None:
        self.left = patterns
        self.refuse_hardlinks = refuse_hardlinks  # filesystem.hardlinks = 'refuse': read no file with several links

    def take(self, lines: list[str]) -> bool:
        """Spend ``lines``' patterns, or say that they do not fit (nothing spent)."""
        patterns = sum(1 for line in lines if line.strip() and not line.startswith("#"))
        if patterns > self.left:
            return False
        self.left -= patterns
        return True


@dataclass(frozen=True)
class Scope:
    base: str
    """Walk-relative directory the file sits in ('' for the root), with a trailing '/'."""
    spec: pathspec.GitIgnoreSpec


def _read_at(dir_fd: int, name: str, refuse_hardlinks: bool = False) -> list[str] | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > MAX_IGNORE_BYTES:
            return None
        if refuse_hardlinks and st.st_nlink > 1:
            log.info("not applying %s: it has %d hard links (filesystem.hardlinks = 'refuse')", name, st.st_nlink)
            return None
        data = os.read(fd, MAX_IGNORE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").splitlines()


def scopes_here(dir_fd: int, rel: str, in_repo: bool, budget: PatternBudget | None = None) -> list[Scope]:
    """This directory's ignore scopes, the one that wins first; a file past ``budget`` is
    not applied (as one over MAX_IGNORE_BYTES is not)."""
    base = rel + "/" if rel else ""
    found = []
    for name, applies in ((".ignore", True), (".gitignore", in_repo)):
        if not applies:
            continue
        lines = [line for line in _read_at(dir_fd, name, budget is not None and budget.refuse_hardlinks) or ()
                 if glob_too_costly(line) is None]
        if lines and budget is not None and not budget.take(lines):
            log.info("not applying %s%s: past the %d ignore patterns one walk compiles", base, name, MAX_WALK_PATTERNS)
            continue
        if lines:
            try:
                found.append(Scope(base, guard_globs(pathspec.GitIgnoreSpec.from_lines(lines))))
            except Exception:  # noqa: BLE001 - a malformed ignore file ignores nothing, as upstream's walker does
                continue
    return found


def ignored(scopes: tuple[Scope, ...], rel: str, is_dir: bool) -> bool:
    """Whether the deepest scope with an opinion on ``rel`` ignores it."""
    for scope in scopes:  # deepest first
        if not rel.startswith(scope.base):
            continue
        sub = rel[len(scope.base):]
        result = scope.spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            return bool(result.include)
    return False


def in_git_repo(real_dir: str) -> bool:
    """Whether ``real_dir`` or an ancestor holds ``.git``."""
    path = real_dir
    while True:
        if os.path.lexists(os.path.join(path, ".git")):
            return True
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent

"""Glob filters and ``.gitignore`` semantics for walks, matched by ``pathspec``.

Hand-written gitignore matching gets the corner cases wrong (``**``, anchoring,
directory-only patterns, negation); pathspec's ``GitIgnoreSpec`` follows git's
own rules, including "the last matching pattern wins" within one file. Between
files, a deeper ``.gitignore`` overrides a shallower one, then
``.git/info/exclude``, as git does.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pathspec

from codespace.contract import FsError, glob_too_costly, guard_globs

from .reading import kind_of, open_regular_at, read_all

log = logging.getLogger(__name__)

MAX_IGNORE_FILE = 1024 * 1024
MAX_WALK_PATTERNS = 2_000
"""Ignore patterns one walk compiles, over all its ignore files. pathspec compiles each into a
regular expression in this process (0.5 ms apiece for ``dir1/**/*.x1``): a 1 MiB .gitignore of
48,678 such lines, which any command can write, took one walk 24 s of the server's CPU. Each
entry is then tried against every pattern of the files above it (0.4 us a pattern), so this
also bounds the matching: real ignore files hold tens to hundreds."""


class PatternBudget:
    """What one walk may still compile, and the ignore files it did not apply (reported
    in the walk's ``errors``, so that its answer does not silently differ from git's)."""

    def __init__(self, patterns: int = MAX_WALK_PATTERNS, *, refuse_hardlinks: bool = False) -> None:
        self.left = patterns
        self.skipped: list[dict] = []
        self.refuse_hardlinks = refuse_hardlinks  # filesystem.hardlinks = 'refuse': read no file with several links

    def skip(self, shown: str, why: str) -> None:
        self.skipped.append({"path": shown, "message": f"this ignore file was not applied: {why}. To proceed: walk "
                                                        "with gitignore=false and leave paths out with exclude globs"})


def compile_globs(patterns: list[str], field: str) -> pathspec.GitIgnoreSpec | None:
    if not patterns:
        return None
    for pattern in patterns:
        why = glob_too_costly(pattern)
        if why is not None:
            raise FsError(f"{field} holds a pattern that is refused because {why}. To proceed: use shorter patterns "
                          "(split one into several).", code="invalid_pattern", details={"field": field})
    try:
        return guard_globs(pathspec.GitIgnoreSpec.from_lines(patterns))
    except (ValueError, TypeError) as exc:  # pathspec's pattern errors are ValueErrors
        raise FsError(
            f"{field} holds a pattern gitignore syntax cannot parse ({exc}). To proceed: fix the pattern, e.g. "
            "'*.py', 'src/**/*.ts', 'build/'.", code="invalid_pattern", details={"field": field},
        ) from None


def matches(spec: pathspec.GitIgnoreSpec, rel: str, is_dir: bool) -> bool:
    return spec.match_file(rel + "/" if is_dir else rel)


@dataclass(frozen=True)
class Scope:
    """One ignore file: ``prefix`` + the entry's path after ``strip`` characters is
    the path relative to the file's directory."""

    strip: int
    prefix: str
    spec: pathspec.GitIgnoreSpec


def load_at(dirfd: int, name: str, shown: str, budget: PatternBudget | None = None) -> pathspec.GitIgnoreSpec | None:
    """The patterns of ignore file ``name`` in an open directory (never following a
    link); None when absent or unreadable, or when it is over 1 MiB or ``budget`` (then
    said in ``budget.skipped``)."""
    try:
        fd, st = open_regular_at(dirfd, name, shown, "read")
    except FsError as exc:
        why = _unread(dirfd, name, exc)
        if budget is not None and why is not None:
            # Found by testing from outside: a FIFO or a link there was left out without a word.
            budget.skip(shown, why)
        return None
    if budget is not None and budget.refuse_hardlinks and st.st_nlink > 1:
        os.close(fd)  # its patterns would tell what another name of it, maybe hidden, holds
        budget.skip(shown, f"it has {st.st_nlink} hard links, and the policy forbids reading such files (rule "
                           "filesystem.hardlinks = 'refuse')")
        return None
    try:
        data = read_all(fd, st.st_size, MAX_IGNORE_FILE, shown)
    except (OSError, FsError) as exc:
        log.info("ignoring %s: %s", shown, exc)
        if budget is not None and st.st_size > MAX_IGNORE_FILE:
            budget.skip(shown, f"it is larger than {MAX_IGNORE_FILE >> 20} MiB")
        return None
    finally:
        os.close(fd)
    lines = [line for line in data.decode("utf-8", "surrogateescape").splitlines() if glob_too_costly(line) is None]
    if budget is not None:
        patterns = sum(1 for line in lines if line.strip() and not line.startswith("#"))
        if patterns > budget.left:
            budget.skip(shown, f"it holds {patterns} patterns, and one walk compiles at most {MAX_WALK_PATTERNS} "
                               f"({budget.left} were left)")
            return None
        budget.left -= patterns
    return guard_globs(pathspec.GitIgnoreSpec.from_lines(lines)) if lines else None


def _unread(dirfd: int, name: str, exc: FsError) -> str | None:
    """Why an ignore file that is there was not read; None when there is none."""
    try:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
    except OSError:
        return None
    kind = kind_of(mode)
    if kind == "symlink":
        return "it is a symbolic link, and ignore files are read without following links"
    if kind != "file":
        return f"it is a {kind}, not a regular file"
    return f"it could not be opened ({exc.message})"


def ignored(scopes: tuple[Scope, ...], rel: str, is_dir: bool) -> bool:
    candidate = rel + "/" if is_dir else rel
    for scope in reversed(scopes):
        result = scope.spec.check_file(scope.prefix + candidate[scope.strip:])
        if result.include is not None:
            return result.include
    return False

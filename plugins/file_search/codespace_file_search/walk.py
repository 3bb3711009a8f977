"""The walk find_files ranks: every file and directory below the search root, as Codex's
file search lists them (hidden names included, ignore files applied), minus what the
workspace policy hides, and bounded.

Safety, after the fs plugin's walk: each directory is opened by name beneath its
parent's descriptor with ``O_NOFOLLOW``, so a directory swapped for a link while the
walk runs is refused by the kernel instead of followed. A path the policy hides is left
out whole, its name included (checked with the gateway's own rules, ``check_exact``, at
every entry a rule names). A link is followed only when its target is a directory inside
the search root that the policy lets us read and that is not one of its own ancestors;
a link leading elsewhere is listed (when its target is readable) but not entered.

A link's target and the root are reached by a resolved path, not beneath a descriptor:
opening such a path resolves its parents again, and ``O_NOFOLLOW`` guards only the last
component, so a parent swapped for a link after the path was checked would be followed
out of what the policy allows. What is opened is therefore kept only when the kernel's
own name for it (``/proc/self/fd``) is the path that was checked (``_open_exactly``).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from dataclasses import dataclass, field

from .walk_ignore import PatternBudget, Scope, ignored, in_git_repo, scopes_here

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_OPEN = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRIES_PER_CLOCK_CHECK = 64  # matched against 2,000 ignore patterns, 64 entries take 0.15-0.3 s


def _open_exactly(real: str) -> int | None:
    """An ``O_PATH`` descriptor of what lies at the resolved path ``real``, or None when
    nothing does or what the open reached is not there (a parent was swapped for a link
    between the check and the open: fail closed)."""
    try:
        fd = os.open(real, _PATH_OPEN)
    except OSError:
        return None
    try:
        if os.readlink(f"/proc/self/fd/{fd}") == real:
            return fd
    except OSError:
        pass  # no /proc: what was opened cannot be shown to be the checked path
    os.close(fd)
    return None


def _open_dir_exactly(real: str) -> int | None:
    """A readable descriptor of the directory at the resolved path ``real``, or None (see
    ``_open_exactly``)."""
    at = _open_exactly(real)
    if at is None:
        return None
    try:
        return os.open(".", _DIR_OPEN, dir_fd=at)  # "." of a descriptor: nothing left to resolve
    except OSError:
        return None
    finally:
        os.close(at)


@dataclass
class Bounds:
    entries: int = 50_000
    dirs: int = 10_000
    depth: int = 64
    seconds: float = 10.0
    refuse_hardlinks: bool = False
    """filesystem.hardlinks = 'refuse': read no ignore file with several links (its patterns
    would tell what another name of it, which may be hidden, holds)."""


@dataclass
class Walked:
    """What a walk found: (path from the root, name, is_dir) for each entry."""

    entries: list[tuple[str, str, bool]] = field(default_factory=list)
    dirs: int = 0
    truncated: str | None = None
    """Which bound stopped the walk, in words; None when it saw everything."""
    errors: int = 0
    cancelled: bool = False
    memo: dict = field(default_factory=dict)
    """What searches derive from these entries and may reuse while the walk is kept."""
    mended: bool = False
    """Made by mending a kept walk where the tree changed (``walk_repair``), not by a walk."""
    contexts: dict = field(default_factory=dict)
    """For a watched walk: each directory read (relative path) -> (real path, depth of its
    entries, ignore scopes, in a repository, (device, inode)), what ``walk_repair`` needs to
    read it again alone."""


class _Stop(Exception):
    pass


class _Walk:
    def __init__(self, root_real: str, rules, bounds: Bounds, cancel: threading.Event | None,  # noqa: ANN001
                 watch=None) -> None:  # noqa: ANN001 - walk_index._Watcher
        self.watch = watch
        self.root = root_real.rstrip("/") or "/"
        self.rules = rules
        prefix = self.root.rstrip("/") + "/"
        self.ruled = {r.path for r in rules.rules if r.path.startswith(prefix)} if rules is not None else set()
        self.bounds = bounds
        self.cancel = cancel
        self.deadline = time.monotonic() + bounds.seconds
        self.out = Walked()
        self.ancestors: set[tuple[int, int]] = set()
        self.skip: set[str] = set()
        """Directories not to descend into (``walk_index`` keeps what it had below them)."""
        self.patterns = PatternBudget(refuse_hardlinks=bounds.refuse_hardlinks)  # what this walk may still compile

    def hidden(self, real: str) -> bool:
        if self.rules is None:
            return False
        if real in self.ruled:
            return self.rules.check_exact(real, "read") is not None
        return False

    def add(self, rel: str, name: str, is_dir: bool) -> None:
        if len(self.out.entries) >= self.bounds.entries:
            self.out.truncated = f"max_entries ({self.bounds.entries} entries listed)"
            raise _Stop
        self.out.entries.append((rel, name, is_dir))

    def check_time(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            self.out.cancelled = True
            self.out.truncated = "cancelled"
            raise _Stop
        if time.monotonic() > self.deadline:
            self.out.truncated = (f"walk_max_ms ({self.bounds.seconds * 1000:g} ms of walking): search a narrower "
                                  "path, or leave directories out with an .ignore file")
            raise _Stop

    def directory(self, fd: int, rel: str, real: str, depth: int, scopes: tuple[Scope, ...], in_repo: bool) -> None:
        self.check_time()
        if self.out.dirs >= self.bounds.dirs:
            self.out.truncated = f"max_dirs ({self.bounds.dirs} directories read)"
            raise _Stop
        self.out.dirs += 1
        if self.watch is not None:
            self.watch.directory(fd, rel)  # before listing: a change from here on is heard
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if self.watch is not None:
            self.out.contexts[rel] = (real, depth, scopes, in_repo, key)
        self.ancestors.add(key)
        try:
            self._entries(fd, rel, real, depth, scopes, in_repo)
        finally:
            self.ancestors.discard(key)

    def _entries(self, fd: int, rel: str, real: str, depth: int, scopes: tuple[Scope, ...], in_repo: bool) -> None:  # noqa: C901
        try:
            with os.scandir(fd) as it:
                found = list(it)
        except OSError:
            self.out.errors += 1
            return
        names = {e.name for e in found}
        if not in_repo and ".git" in names:
            in_repo = True
        here = scopes_here(fd, rel, in_repo, self.patterns) if (".ignore" in names or ".gitignore" in names) else []
        if here:
            scopes = (*here, *scopes)
        pre = rel + "/" if rel else ""
        real_pre = real.rstrip("/") + "/"
        later = []
        listed = self.out.entries
        limit = self.bounds.entries
        ruled = self.ruled
        clock = 0
        for entry in found:  # the hot loop of a large tree: no stat, no call it can skip
            clock += 1
            if clock == _ENTRIES_PER_CLOCK_CHECK:  # every entry: a link costs a resolve and a match too
                clock = 0
                self.check_time()
            name = entry.name
            if ruled and self.hidden(real_pre + name):
                continue
            try:
                # Most entries are plain files: one d_type test settles them.
                if entry.is_file(follow_symlinks=False):
                    is_dir = False
                elif entry.is_dir(follow_symlinks=False):
                    is_dir = True
                elif entry.is_symlink():
                    self._link(pre + name, name, real_pre + name, depth, scopes, in_repo)
                    continue
                else:
                    is_dir = False  # a fifo, socket or device: listed as upstream lists it
            except OSError:
                self.out.errors += 1
                continue
            path = pre + name
            if scopes and ignored(scopes, path, is_dir):
                continue
            if len(listed) >= limit:
                self.add(path, name, is_dir)  # records the bound and stops
            listed.append((path, name, is_dir))
            if is_dir:
                later.append((name, path, real_pre + name))
        if depth >= self.bounds.depth:
            if later and self.out.truncated is None:
                self.out.truncated = f"max_depth ({self.bounds.depth}): deeper directories were not read"
            return
        for name, path, target in later:
            if path in self.skip:
                continue
            try:
                child = os.open(name, _DIR_OPEN, dir_fd=fd)
            except OSError:
                self.out.errors += 1  # replaced or removed while the walk ran: not entered
                continue
            try:
                self.directory(child, path, target, depth + 1, scopes, in_repo)
            finally:
                os.close(child)

    def _link(self, path: str, name: str, link: str, depth: int, scopes: tuple[Scope, ...], in_repo: bool) -> None:
        if self.rules is not None and _way_hidden(self.rules, link):
            return  # its way looks inside what the policy hides: whether it arrives would tell what lies there
        real = os.path.realpath(link)
        if self.watch is not None:
            self.watch.link(real)
        if self.rules is not None and self.rules.check_exact(real, "read") is not None:
            return  # where it leads is hidden: not even its kind is shown
        at = _open_exactly(real)
        if at is None:
            return  # dangling (upstream's walker skips it too), or changed since it was resolved
        try:
            st = os.fstat(at)
            if stat.S_ISLNK(st.st_mode):
                return  # its target was swapped for a link after it was resolved
            is_dir = stat.S_ISDIR(st.st_mode)
            if is_dir and (st.st_dev, st.st_ino) in self.ancestors:
                return  # a loop: upstream's walker reports it as an error and lists nothing
            if scopes and ignored(scopes, path, is_dir):
                return
            self.add(path, name, is_dir)
            inside = real == self.root or real.startswith(self.root.rstrip("/") + "/")
            if not is_dir or not inside or depth >= self.bounds.depth:
                return
            try:
                fd = os.open(".", _DIR_OPEN, dir_fd=at)  # the very directory checked: not its path again
            except OSError:
                self.out.errors += 1
                return
        finally:
            os.close(at)
        try:
            self.directory(fd, path, real, depth + 1, scopes, in_repo)
        finally:
            os.close(fd)


def _way_hidden(rules, link: str) -> bool:  # noqa: ANN001 - codespace PathRules
    """Found by testing from outside: which links were listed (and entered) told whether a name in
    a hidden directory was a link and where it led, as realpath went through it."""
    from codespace.contract import TooLongAWay

    try:
        return rules.hidden_on_the_way(link) is not None
    except TooLongAWay:  # past the kernel's bounds: it would not resolve either
        return True


def walk_below(root_real: str, rel: str, context: tuple, rules, bounds: Bounds,  # noqa: ANN001 - PathRules
               cancel: threading.Event | None, watch, skip: set[str], ancestors: set[tuple[int, int]]) -> Walked | None:  # noqa: ANN001
    """The walk of the directory ``rel`` alone (not its own entry), read in ``context`` (as
    ``Walked.contexts`` holds it), not descending into ``skip``; None when it is no longer
    the directory the context names (removed, or its path now leads elsewhere)."""
    real, depth, scopes, in_repo, _ = context
    fd = _open_dir_exactly(real)
    if fd is None:
        return None
    state = _Walk(root_real, rules, bounds, cancel, watch)
    state.skip, state.ancestors = skip, set(ancestors)
    try:
        state.directory(fd, rel, real, depth, scopes, in_repo)
    except _Stop:
        pass
    finally:
        os.close(fd)
    return state.out


def walk(root_real: str, rules=None, bounds: Bounds | None = None,  # noqa: ANN001 - codespace PathRules
         cancel: threading.Event | None = None, watch=None) -> Walked:  # noqa: ANN001 - walk_index._Watcher
    """Every entry below ``root_real`` (a resolved directory path), the root itself first
    as ``("", "", True)`` as upstream lists it; ``watch`` is told of each directory read."""
    state = _Walk(root_real, rules, bounds or Bounds(), cancel, watch)
    fd = _open_dir_exactly(root_real)
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "the search root is not a directory at its resolved path any more "
                                "(removed, or a parent replaced by a link, while the search began): search again",
                                root_real)
    try:
        state.out.entries.append(("", "", True))
        state.directory(fd, "", root_real, 1, (), in_git_repo(root_real))
    except _Stop:
        pass
    finally:
        os.close(fd)
    return state.out

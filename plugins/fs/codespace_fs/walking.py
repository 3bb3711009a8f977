"""Bounded walks, breadth first, each directory opened beneath the walk's root fd.

Order: breadth first, names sorted within each directory. When a limit stops the
walk, the agent still sees the top of the tree whole rather than one deep corner
of it. Every directory is opened by its path *below the walk's own fd* with links
refused (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or ``openat(O_NOFOLLOW)`` per
component), so renaming a directory mid-walk or swapping it for a link cannot
carry the walk elsewhere; it is reported as an entry error instead.
Limits (upstream defaults, policy ``limits.walk_*``): depth 64, 10,000 directories,
50,000 entries, 4 MiB of response; and ours, 10 s of walking (``walk_max_ms``): hitting one
sets ``truncated``.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from operator import attrgetter

from codespace.contract import EntryError, FsError, WalkRequest, WalkResult

from . import errors, ignore, kernel
from .ancestor_ignores import ancestor_scopes
from .names import join
from .reading import kind_of
from .resolve import O_CLOEXEC, O_DIR, O_NOFOLLOW, O_PATH, Confinement
from .walk_links import follow_link

_by_name = attrgetter("name")
_DIR_READ = os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC
_BELOW = kernel.RESOLVE_BENEATH | kernel.RESOLVE_NO_SYMLINKS | kernel.RESOLVE_NO_MAGICLINKS
ENTRY_OVERHEAD = 48  # JSON around one entry: {"path":"","kind":"directory","size":null,"depth":1},


class Limits:
    def __init__(self, request: WalkRequest, limits) -> None:  # noqa: ANN001 - codespace Limits model
        self.depth = _clamp(request.max_depth, limits.walk_max_depth)
        self.dirs = _clamp(request.max_dirs, limits.walk_max_dirs)
        self.entries = _clamp(request.max_entries, limits.walk_max_entries)
        self.bytes = _clamp(request.max_bytes, limits.walk_max_response_bytes)
        self.ms = limits.walk_max_ms
        # The clock starts before the globs are compiled: 256 of the costliest allowed take 1.3 s.
        self.deadline = time.monotonic() + self.ms / 1000


def _clamp(requested: int | None, limit: int) -> int:
    return limit if requested is None else min(requested, limit)


def _open_below(mode: str, base: int, rel: str) -> int:
    if not rel:
        return os.open(".", _DIR_READ, dir_fd=base)
    if mode == "openat2":
        return kernel.openat2(base, os.fsencode(rel), _DIR_READ, _BELOW)
    fd = base
    try:
        for part in rel.split("/"):
            nxt = os.open(part, _DIR_READ, dir_fd=fd)
            if fd != base:
                os.close(fd)
            fd = nxt
    except BaseException:
        if fd != base:
            os.close(fd)
        raise
    return fd


def walk(conf: Confinement, request: WalkRequest, limits, cancel: threading.Event | None = None) -> WalkResult:  # noqa: ANN001
    """The ``walk`` answer: :func:`collect` as the contract's model, built without
    re-validating what this module produced (validation would cost more than the walk)."""
    data = collect(conf, request, limits, cancel)
    data["errors"] = [EntryError.model_construct(**error) for error in data["errors"]]
    return WalkResult.model_construct(**data)


def collect(conf: Confinement, request: WalkRequest, limits, cancel: threading.Event | None = None) -> dict:  # noqa: ANN001
    """The walk itself, as plain data (the shape of WalkResult)."""
    path = request.path
    lim = Limits(request, limits)
    include = ignore.compile_globs(request.include, "include")
    exclude = ignore.compile_globs(request.exclude, "exclude")
    start = conf.open(path, O_PATH | O_DIR, need="read", follow_last=True, action="walk")
    walk = _Walk(conf, request, lim, include, exclude, start.path, cancel)
    try:
        scopes = ancestor_scopes(conf, path, walk.patterns) if request.gitignore else ()
    except BaseException:
        os.close(start.fd)
        raise
    # Queue items: (base fd, path below it, path from the walked directory (raw),
    # the same for display (UTF-8 safe), depth of its entries, real path, ignore scopes)
    walk.queue.append((start.fd, "", "", "", 1, start.path, scopes))
    walk.owned.append(start.fd)
    try:
        walk.run()
    finally:
        for fd in walk.owned:
            os.close(fd)
    truncated_reason = walk.truncated_reason
    if truncated_reason == "cancelled":
        raise FsError(f"the walk of {path} was cancelled", path=path, code="cancelled")
    if truncated_reason is None and walk.depth_cut:
        truncated_reason = f"max_depth ({lim.depth}): deeper directories were not read"
    return {
        "path": path, "entries": walk.entries, "truncated": truncated_reason is not None,
        "truncated_reason": truncated_reason, "errors": walk.patterns.skipped + walk.problems, "dirs_visited": walk.dirs,
    }


class _Walk:
    """One walk's state: the queue of directories still to read, what was found, and
    how much of each limit it used. Its loops over entries keep their state in locals:
    they run once per entry of the tree."""

    def __init__(
        self, conf: Confinement, request: WalkRequest, lim: Limits, include, exclude, start_real: str,  # noqa: ANN001
        cancel: threading.Event | None,
    ) -> None:
        self.conf = conf
        self.lim = lim
        self.include = include
        self.exclude = exclude
        # Policy entries below the walk's root: a directory named by one is checked
        # before it is read (a 'none' area is listed by name, never entered).
        prefix = start_real.rstrip("/") + "/"
        self.ruled = {r.path for r in conf.rules.rules if r.path.startswith(prefix)}
        self.include_hidden = request.include_hidden
        self.prune_hidden = request.prune_hidden_dirs
        self.sizes = request.sizes
        self.linked_sizes = not conf.refuse_hardlinks  # else a file with several links gets size null
        self.gitignore = request.gitignore
        self.follow = request.follow_dir_links
        self.plain = include is None and exclude is None and not self.gitignore and self.include_hidden
        self.entries: list[dict] = []
        self.problems: list[dict] = []
        # the ignore files' patterns it may still compile, and whether it may read one with several links
        self.patterns = ignore.PatternBudget(refuse_hardlinks=conf.refuse_hardlinks)
        self.queue: list[tuple] = []
        self.owned: list[int] = []
        self.seen: set[tuple[int, int]] = set()
        self.budget = lim.bytes - 120  # the result's own fields
        self.used = 0
        self.truncated_reason: str | None = None
        self.depth_cut = lim.depth == 0
        self.dirs = 0
        self.deadline = lim.deadline
        self.cancel = cancel

    def must_stop(self) -> bool:
        """Cancelled, or out of time: then ``truncated_reason`` says which."""
        if self.cancel is not None and self.cancel.is_set():
            self.truncated_reason = "cancelled"
            return True
        if time.monotonic() <= self.deadline:
            return False
        # Ignore files in the tree are the usual cause: any command can write thousands of patterns,
        # and every entry below them is matched against each.
        self.truncated_reason = (
            f"walk_max_ms ({self.lim.ms} ms of walking): to see the rest, walk a deeper path, lower max_depth "
            "or leave directories out with exclude" + (", or walk with gitignore=false" if self.gitignore else ""))
        return True

    def run(self) -> None:
        queue = self.queue
        lim = self.lim
        head = 0 if lim.depth > 0 else 1
        while head < len(queue):
            if self.must_stop():
                break
            base, rel, raw_dir, shown_dir, depth, real_dir, scopes = queue[head]
            head += 1
            if self.dirs >= lim.dirs:
                self.truncated_reason = f"max_dirs ({lim.dirs} directories read)"
                break
            read = self._read_dir(base, rel, raw_dir, shown_dir, real_dir, scopes)
            if read is None:
                continue
            fd, found, scopes = read
            pre = raw_dir + "/" if raw_dir else ""
            shown_pre = shown_dir + "/" if shown_dir else ""
            later: list[tuple[str, str, str, str]] = []  # (name, raw path, shown path, kind) to descend into
            try:
                size = self._plain_size(found, shown_pre)
                if size is not None:
                    self.used += size
                    self._list_plain(found, pre, shown_pre, depth, later)
                else:
                    self._list_filtered(found, pre, shown_pre, depth, scopes, later)
            finally:
                os.close(fd)
            if self.truncated_reason is not None:
                break  # before _descend: a cut walk opens none of the links it listed
            self._descend(later, base, rel, depth, real_dir, scopes)

    def _read_dir(self, base: int, rel: str, raw_dir: str, shown_dir: str, real_dir: str, scopes: tuple):  # noqa: ANN202
        """The directory's fd, its entries sorted by name and the ignore scopes that
        apply in it; None (and an entry error) when it cannot be read."""
        try:
            fd = _open_below(self.conf.mode, base, rel)
        except OSError as exc:
            self.problems.append({"path": shown_dir, "message": _dir_error(exc)})
            return None
        self.dirs += 1
        try:
            if self.follow:
                st = os.fstat(fd)
                self.seen.add((st.st_dev, st.st_ino))
            with os.scandir(fd) as it:
                found = sorted(it, key=_by_name)
            if self.gitignore:
                spec = ignore.load_at(fd, ".gitignore", join(shown_dir, ".gitignore") if shown_dir else ".gitignore",
                                      self.patterns)
                if spec is not None:
                    scopes = (*scopes, ignore.Scope(len(raw_dir) + 1 if raw_dir else 0, "", spec))
        except OSError as exc:
            os.close(fd)
            self.problems.append({"path": shown_dir, "message": f"cannot read: {exc.strerror}"})
            return None
        return fd, found, scopes

    def _plain_size(self, found: list[os.DirEntry], shown_pre: str) -> int | None:
        """The response bytes of listing the whole directory by the fast path, or None
        when it does not apply: a filter, a name to escape, or a limit in the way."""
        if not self.plain:
            return None
        joined = "".join([e.name for e in found])
        if not (joined.isascii() or errors.is_safe(joined)):
            return None
        size = (len(joined) if joined.isascii() else len(joined.encode())) + len(found) * (
            len(shown_pre) + ENTRY_OVERHEAD)
        if len(self.entries) + len(found) <= self.lim.entries and self.used + size <= self.budget:
            return size
        return None

    def _list_plain(self, found: list[os.DirEntry], pre: str, shown_pre: str, depth: int, later: list) -> None:
        """The common case, kept tight: no filters, every name printable, the whole
        directory within the limits. The names here are printable; the directory's own
        path may not be (``shown_pre`` is its escaped form)."""
        append = self.entries.append
        problems = self.problems
        sizes = self.sizes
        linked = self.linked_sizes
        follow = self.follow
        same = pre == shown_pre
        for entry in found:
            name = entry.name
            p = pre + name
            shown = p if same else shown_pre + name
            if entry.is_dir(follow_symlinks=False):
                append({"path": shown, "kind": "directory", "depth": depth})
                later.append((name, p, shown, "directory"))
                continue
            if entry.is_file(follow_symlinks=False):
                item = {"path": shown, "kind": "file", "depth": depth}
                if sizes:
                    _add_size(entry, item, linked)
                append(item)
                continue
            kind = _kind(entry, shown_pre, problems)
            if kind is not None:
                append({"path": shown, "kind": kind, "depth": depth})
                if kind == "symlink" and follow:
                    later.append((name, p, shown, kind))

    def _list_filtered(  # noqa: C901, PLR0912
        self, found: list[os.DirEntry], pre: str, shown_pre: str, depth: int, scopes: tuple, later: list,
    ) -> None:
        """Hidden names, ignore files, include and exclude globs, escaped names and
        the entry and byte limits, checked entry by entry."""
        entries = self.entries
        append = entries.append
        problems = self.problems
        include, exclude = self.include, self.exclude
        include_hidden = self.include_hidden
        gitignore = self.gitignore
        sizes = self.sizes
        linked = self.linked_sizes
        follow = self.follow
        max_entries = self.lim.entries
        budget = self.budget
        used = self.used
        # Matching is what can take long, and one entry against the costliest globs allowed takes
        # 0.1-0.2 s (found by testing from outside: read every 64 entries, the clock let a 10 s
        # walk run 22 s), so the clock is read at every entry: 60 ns against a match's microseconds.
        timed = gitignore or include is not None or exclude is not None
        deadline = self.deadline
        monotonic = time.monotonic
        cancelled = self.cancel.is_set if self.cancel is not None else bool
        try:
            for entry in found:
                if timed and (monotonic() > deadline or cancelled()) and self.must_stop():
                    break
                name = entry.name
                if name[0] == "." and not include_hidden:
                    continue
                p = pre + name
                kind = _kind(entry, shown_pre, problems)
                if kind is None:
                    continue
                is_dir = kind == "directory"
                if gitignore and ((is_dir and name == ".git") or ignore.ignored(scopes, p, is_dir)):
                    continue
                if exclude is not None and ignore.matches(exclude, p, is_dir):
                    continue
                if name.isascii() or errors.is_safe(name):
                    shown = shown_pre + name
                else:
                    shown = shown_pre + errors.safe_name(name)
                    problems.append({"path": shown, "message": _NON_UTF8})
                if include is None or ignore.matches(include, p, is_dir):
                    if len(entries) >= max_entries:
                        self.truncated_reason = f"max_entries ({max_entries})"
                        break
                    used += (len(shown) if shown.isascii() else len(shown.encode())) + ENTRY_OVERHEAD
                    if used > budget:
                        self.truncated_reason = f"max_bytes ({self.lim.bytes} bytes of response)"
                        break
                    item = {"path": shown, "kind": kind, "depth": depth}
                    if sizes and kind == "file":
                        _add_size(entry, item, linked)
                    append(item)
                if is_dir or (kind == "symlink" and follow):
                    later.append((name, p, shown, kind))
        finally:
            self.used = used

    def _descend(self, later: list, base: int, rel: str, depth: int, real_dir: str, scopes: tuple) -> None:
        """Queue the directories found (and links to them, when followed), short of
        the depth limit and of areas the policy does not let the walk read."""
        conf = self.conf
        rel_pre = rel + "/" if rel else ""
        real_pre = real_dir.rstrip("/") + "/"
        for name, p, shown, kind in later:
            if name[0] == "." and self.prune_hidden:
                continue
            if depth >= self.lim.depth:
                self.depth_cut = True
                continue
            real = real_pre + name
            if kind == "symlink":
                if self.must_stop():  # each link is a resolution of its own (found by testing: 300 took 2 minutes)
                    return
                item = follow_link(conf, real, p, shown, depth, scopes, self.seen, self.owned, self.problems)
                if item is not None:
                    self.queue.append(item)
                continue
            if real in self.ruled:
                refusal = conf.rules.check_exact(real, "read")
                if refusal is not None:
                    self.problems.append({"path": shown, "message": f"not entered: {refusal.message}"})
                    continue
            self.queue.append((base, rel_pre + name, p, shown, depth + 1, real, scopes))


def _kind(entry: os.DirEntry, shown_pre: str, problems: list[dict]) -> str | None:
    try:
        if entry.is_dir(follow_symlinks=False):
            return "directory"
        if entry.is_file(follow_symlinks=False):
            return "file"
        if entry.is_symlink():
            return "symlink"
        return kind_of(entry.stat(follow_symlinks=False).st_mode)
    except OSError as exc:
        problems.append({"path": shown_pre + errors.safe_name(entry.name), "message": f"cannot stat: {exc.strerror}"})
        return None


def _add_size(entry: os.DirEntry, item: dict, linked: bool) -> None:
    """``linked``: show the size of a file with several links too (filesystem.hardlinks = 'allow');
    else it is null, as what another name of it may hide."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return
    item["size"] = st.st_size if linked or st.st_nlink == 1 else None


_NON_UTF8 = (
    "the name is not valid UTF-8, so it is shown with \\xNN escapes and the file tools cannot address it; "
    "rename it with a command (for example mv) to use it"
)


def _dir_error(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
        return "not entered: it was replaced (by a link or a file) while the walk ran"
    if exc.errno == errno.ENOENT:
        return "not entered: it was removed while the walk ran"
    return f"cannot open: {exc.strerror}"

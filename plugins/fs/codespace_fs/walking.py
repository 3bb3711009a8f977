"""Bounded walks, breadth first, each directory opened beneath the walk's root fd.

Order: breadth first, names sorted within each directory. When a limit stops the
walk, the agent still sees the top of the tree whole rather than one deep corner
of it. Every directory is opened by its path *below the walk's own fd* with links
refused (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or ``openat(O_NOFOLLOW)`` per
component), so renaming a directory mid-walk or swapping it for a link cannot
carry the walk elsewhere; it is reported as an entry error instead.
Limits (upstream defaults, policy ``limits.walk_*``): depth 64, 10,000 directories,
50,000 entries, 4 MiB of response; hitting one sets ``truncated``.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from operator import attrgetter

from codespace.contract import EntryError, FsError, WalkRequest, WalkResult

from . import errors, ignore, kernel
from .reading import kind_of
from .resolve import O_CLOEXEC, O_DIR, O_NOFOLLOW, O_PATH, Confinement

_by_name = attrgetter("name")
_DIR_READ = os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC
_BELOW = kernel.RESOLVE_BENEATH | kernel.RESOLVE_NO_SYMLINKS | kernel.RESOLVE_NO_MAGICLINKS
ENTRY_OVERHEAD = 48  # JSON around one entry: {"path":"","kind":"directory","size":null,"depth":1},
MAX_FOLLOWED_LINKS = 256


class Limits:
    def __init__(self, request: WalkRequest, limits) -> None:  # noqa: ANN001 - codespace Limits model
        self.depth = _clamp(request.max_depth, limits.walk_max_depth)
        self.dirs = _clamp(request.max_dirs, limits.walk_max_dirs)
        self.entries = _clamp(request.max_entries, limits.walk_max_entries)
        self.bytes = _clamp(request.max_bytes, limits.walk_max_response_bytes)


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


def collect(conf: Confinement, request: WalkRequest, limits, cancel: threading.Event | None = None) -> dict:  # noqa: ANN001, C901, PLR0912, PLR0915
    """The walk itself, as plain data (the shape of WalkResult)."""
    path = request.path
    lim = Limits(request, limits)
    include = ignore.compile_globs(request.include, "include")
    exclude = ignore.compile_globs(request.exclude, "exclude")
    start = conf.open(path, O_PATH | O_DIR, need="read", follow_last=True, action="walk")
    start_real = start.path
    # Policy entries below the walk's root: a directory named by one is checked
    # before it is read (a 'none' area is listed by name, never entered).
    prefix = start_real.rstrip("/") + "/"
    ruled = {r.path for r in conf.rules.rules if r.path.startswith(prefix)}
    try:
        scopes = _ancestor_scopes(conf, path) if request.gitignore else ()
    except BaseException:
        os.close(start.fd)
        raise

    entries: list[dict] = []
    problems: list[dict] = []
    append = entries.append
    include_hidden = request.include_hidden
    prune_hidden = request.prune_hidden_dirs
    sizes = request.sizes
    gitignore = request.gitignore
    follow = request.follow_dir_links
    plain = include is None and exclude is None and not gitignore and include_hidden
    # Queue items: (base fd, path below it, path from the walked directory (raw),
    # the same for display (UTF-8 safe), depth of its entries, real path, ignore scopes)
    queue: list[tuple] = [(start.fd, "", "", "", 1, start_real, scopes)]
    owned = [start.fd]
    seen: set[tuple[int, int]] = set()
    budget = lim.bytes - 120  # the result's own fields
    used = 0
    truncated_reason: str | None = None
    depth_cut = lim.depth == 0
    dirs = 0
    head = 0 if lim.depth > 0 else 1
    try:
        while head < len(queue):
            if cancel is not None and cancel.is_set():
                truncated_reason = "cancelled"
                break
            base, rel, raw_dir, shown_dir, depth, real_dir, scopes = queue[head]
            head += 1
            if dirs >= lim.dirs:
                truncated_reason = f"max_dirs ({lim.dirs} directories read)"
                break
            try:
                fd = _open_below(conf.mode, base, rel)
            except OSError as exc:
                problems.append({"path": shown_dir, "message": _dir_error(exc)})
                continue
            dirs += 1
            try:
                if follow:
                    st = os.fstat(fd)
                    seen.add((st.st_dev, st.st_ino))
                with os.scandir(fd) as it:
                    found = sorted(it, key=_by_name)
                if gitignore:
                    spec = ignore.load_at(fd, ".gitignore", _join(real_dir, ".gitignore"))
                    if spec is not None:
                        scopes = (*scopes, ignore.Scope(len(raw_dir) + 1 if raw_dir else 0, "", spec))
            except OSError as exc:
                os.close(fd)
                problems.append({"path": shown_dir, "message": f"cannot read: {exc.strerror}"})
                continue
            pre = raw_dir + "/" if raw_dir else ""
            shown_pre = shown_dir + "/" if shown_dir else ""
            rel_pre = rel + "/" if rel else ""
            real_pre = real_dir.rstrip("/") + "/"
            later: list[tuple[str, str, str, str]] = []  # (name, raw path, shown path, kind) to descend into
            try:
                names = [e.name for e in found]
                joined = "".join(names)
                simple = plain and (joined.isascii() or errors.is_safe(joined))
                if simple:
                    size = (len(joined) if joined.isascii() else len(joined.encode())) + len(found) * (
                        len(shown_pre) + ENTRY_OVERHEAD)
                    simple = len(entries) + len(found) <= lim.entries and used + size <= budget
                if simple:
                    # The common case, kept tight: no filters, every name printable,
                    # the whole directory within the limits.
                    used += size
                    for entry in found:
                        name = entry.name
                        p = pre + name
                        if entry.is_dir(follow_symlinks=False):
                            append({"path": p, "kind": "directory", "depth": depth})
                            later.append((name, p, p, "directory"))
                            continue
                        if entry.is_file(follow_symlinks=False):
                            item = {"path": p, "kind": "file", "depth": depth}
                            if sizes:
                                _add_size(entry, item)
                            append(item)
                            continue
                        kind = _kind(entry, pre, problems)
                        if kind is not None:
                            append({"path": p, "kind": kind, "depth": depth})
                            if kind == "symlink" and follow:
                                later.append((name, p, p, kind))
                else:
                    for entry in found:
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
                            if len(entries) >= lim.entries:
                                truncated_reason = f"max_entries ({lim.entries})"
                                break
                            used += (len(shown) if shown.isascii() else len(shown.encode())) + ENTRY_OVERHEAD
                            if used > budget:
                                truncated_reason = f"max_bytes ({lim.bytes} bytes of response)"
                                break
                            item = {"path": shown, "kind": kind, "depth": depth}
                            if sizes and kind == "file":
                                _add_size(entry, item)
                            append(item)
                        if is_dir or (kind == "symlink" and follow):
                            later.append((name, p, shown, kind))
            finally:
                os.close(fd)
            for name, p, shown, kind in later:
                if name[0] == "." and prune_hidden:
                    continue
                if depth >= lim.depth:
                    depth_cut = True
                    continue
                real = real_pre + name
                if kind == "symlink":
                    item = _follow(conf, real, p, shown, depth, scopes, seen, owned, problems)
                    if item is not None:
                        queue.append(item)
                    continue
                if real in ruled:
                    refusal = conf.rules.check_exact(real, "read")
                    if refusal is not None:
                        problems.append({"path": shown, "message": f"not entered: {refusal.message}"})
                        continue
                queue.append((base, rel_pre + name, p, shown, depth + 1, real, scopes))
            if truncated_reason is not None:
                break
    finally:
        for fd in owned:
            os.close(fd)
    if truncated_reason == "cancelled":
        raise FsError(f"the walk of {path} was cancelled", path=path, code="cancelled")
    if truncated_reason is None and depth_cut:
        truncated_reason = f"max_depth ({lim.depth}): deeper directories were not read"
    return {
        "path": path, "entries": entries, "truncated": truncated_reason is not None,
        "truncated_reason": truncated_reason, "errors": problems, "dirs_visited": dirs,
    }


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


def _add_size(entry: os.DirEntry, item: dict) -> None:
    try:
        item["size"] = entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass


_NON_UTF8 = (
    "the name is not valid UTF-8, so it is shown with \\xNN escapes and the file tools cannot address it; "
    "rename it with a command (for example mv) to use it"
)


def _join(parent: str, name: str) -> str:
    return parent + name if parent.endswith("/") else f"{parent}/{name}"


def _dir_error(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
        return "not entered: it was replaced (by a link or a file) while the walk ran"
    if exc.errno == errno.ENOENT:
        return "not entered: it was removed while the walk ran"
    return f"cannot open: {exc.strerror}"


def _follow(conf, real, raw, shown, depth, scopes, seen, owned, problems):  # noqa: ANN001, ANN202
    """Queue item for a link to a directory inside the root, resolved by the
    confinement (so the kernel keeps it inside) and re-checked against the policy."""
    if not conf.follow_links:
        problems.append({"path": shown, "message": "not followed: policy filesystem.symlinks = 'never'"})
        return None
    if len(owned) > MAX_FOLLOWED_LINKS:
        problems.append({"path": shown, "message": f"not followed: more than {MAX_FOLLOWED_LINKS} links"})
        return None
    try:
        opened = conf.open(real, O_PATH | O_DIR, need="read", follow_last=True, action="walk")
    except FsError as exc:
        if exc.errno == errno.ENOTDIR:
            return None  # a link to a file: listed, nothing to walk
        problems.append({"path": shown, "message": f"not followed: {exc.message}"})
        return None
    st = os.fstat(opened.fd)
    if not stat.S_ISDIR(st.st_mode):  # pragma: no cover - O_DIRECTORY guarantees it
        os.close(opened.fd)
        return None
    if (st.st_dev, st.st_ino) in seen:
        os.close(opened.fd)
        problems.append({"path": shown, "message": "not followed: it leads to a directory already walked (a loop)"})
        return None
    owned.append(opened.fd)
    return (opened.fd, "", raw, shown, depth + 1, opened.path, scopes)


def _ancestor_scopes(conf: Confinement, path: str) -> tuple[ignore.Scope, ...]:
    """Ignore files above the walked directory, up to the repository top (the
    nearest directory holding ``.git``), as git applies them; lowest precedence
    first."""
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
                spec = _load_below(fd, (".git", "info"), "exclude", _join(chain[i], ".git/info/exclude"))
                if spec is not None:
                    scopes.append(ignore.Scope(0, pre, spec))
            if i < len(chain) - 1:  # the walked directory's own file is read by the walk
                spec = ignore.load_at(fd, ".gitignore", _join(chain[i], ".gitignore"))
                if spec is not None:
                    scopes.append(ignore.Scope(0, pre, spec))
        return tuple(scopes)
    finally:
        for _, fd in opened:
            os.close(fd)


def _load_below(fd: int, dirs: tuple[str, ...], name: str, shown: str):  # noqa: ANN202
    """An ignore file some directories below ``fd``, each opened without following links."""
    held: list[int] = []
    try:
        cur = fd
        for d in dirs:
            cur = os.open(d, os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC, dir_fd=cur)
            held.append(cur)
        return ignore.load_at(cur, name, shown)
    except OSError:
        return None
    finally:
        for h in held:
            os.close(h)

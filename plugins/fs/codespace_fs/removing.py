"""Removal, fd-relative all the way down.

``remove`` looks at the leaf with ``fstatat(AT_SYMLINK_NOFOLLOW)`` through the
parent's fd, so a link is removed, never its target. A recursive removal opens
each directory with ``openat(O_NOFOLLOW | O_DIRECTORY)`` under the fd of the one
above and unlinks names relative to it: a directory swapped for a link mid-way
fails to open (the link itself is then unlinked), so the removal cannot be
steered outside the tree, whatever happens to the paths meanwhile.

The gateway checks the path named in the call; a tree also holds paths the policy
protects (a nested ``.git``, a ``none`` area). Those are checked here, before
anything is removed, so a recursive remove is refused whole rather than half done.
"""

from __future__ import annotations

import errno
import os
import stat

from codespace.contract import FsError

from . import errors
from .resolve import O_CLOEXEC, O_DIR, O_NOFOLLOW, Confinement

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    import threading

    from codespace.contract import RemoveRequest, RemoveResult

_DIR_FLAGS = os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC
MAX_PASSES = 8  # re-reads of a directory that keeps gaining entries while we empty it


def check_tree(conf: Confinement, dirfd: int, name: str, paths: tuple[str, ...], action: str,
               cancel: threading.Event | None = None) -> None:
    """Refuse (FsError) when anything inside directory ``name`` would land on a path
    the policy does not let us write, under any of ``paths`` (where the tree is now
    and, for a move, where it is going)."""
    rules = conf.rules
    names = rules.protected_names
    # Only entries named like a protected name, or lying on a policy entry or an
    # anchored protected path below the tree, can be refused; everything else in a
    # writable tree is writable, so the scan compares names and a few strings.
    prefixes = tuple(p.rstrip("/") + "/" for p in paths)
    special = {r.path for r in rules.rules if r.path.startswith(prefixes)}
    for rule in rules.rules:
        if rule.access == "write":
            for anchored in rules.protected_anchored:
                special.add(rule.path.rstrip("/") + "/" + "/".join(anchored))
    special = {s for s in special if s.startswith(prefixes)}
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
    except OSError as exc:
        raise errors.os_error(exc, paths[0], action) from exc
    # Depth first, one fd per level: [fd, path below the tree, entries, next index].
    stack: list[list] = []
    try:
        stack.append([top, "", [], 0])
        stack[0][2] = _scan(top)
        while stack:
            if cancel is not None and cancel.is_set():
                raise FsError(f"{action} of {paths[0]} was cancelled before anything changed", path=paths[0],
                              code="cancelled")
            frame = stack[-1]
            fd, rel, found, i = frame
            if i >= len(found):
                stack.pop()
                os.close(fd)
                continue
            frame[3] = i + 1
            entry_name, is_dir = found[i]
            sub = f"{rel}/{entry_name}" if rel else entry_name
            if entry_name in names or special:
                for base in paths:
                    full = f"{base}/{sub}"
                    if entry_name in names or full in special:
                        refusal = rules.check_exact(full, "write")
                        if refusal is not None:
                            shown = errors.safe_name(full)
                            raise errors.refused(
                                f"{paths[0]} holds {shown}: {refusal.message}", path=paths[0], rule=refusal.rule,
                                hint=f"{action} the other paths one by one and leave the protected ones alone",
                            )
            if is_dir:
                try:
                    child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                stack.append([child, sub, [], 0])
                stack[-1][2] = _scan(child)
    finally:
        for frame in stack:
            os.close(frame[0])


def _scan(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


def remove(conf: Confinement, request: RemoveRequest, cancel: threading.Event | None = None) -> RemoveResult:
    from codespace.contract import RemoveResult

    path = request.path
    parent, name = conf.open_parent(path, need="write", action="remove")
    try:
        try:
            st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
        except FileNotFoundError:
            if request.force:
                return RemoveResult(path=path, removed=False, entries_removed=0)
            raise FsError(
                f"cannot remove {path}: it does not exist. To proceed: check the path, or pass force=true to accept "
                "that.", path=path, errno=errno.ENOENT,
            ) from None
        except OSError as exc:
            raise errors.os_error(exc, path, "remove") from exc
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(name, dir_fd=parent.fd)
            except FileNotFoundError:
                if request.force:
                    return RemoveResult(path=path, removed=False, entries_removed=0)
                raise
            except OSError as exc:
                raise errors.os_error(exc, path, "remove") from exc
            return RemoveResult(path=path, removed=True, entries_removed=1)
        if not request.recursive:
            try:
                os.rmdir(name, dir_fd=parent.fd)
            except OSError as exc:
                raise errors.os_error(exc, path, "remove") from exc
            return RemoveResult(path=path, removed=True, entries_removed=1)
        check_tree(conf, parent.fd, name, (parent.path,), "remove", cancel)
        count = remove_tree(parent.fd, name, path, cancel)
        return RemoveResult(path=path, removed=True, entries_removed=count)
    finally:
        os.close(parent.fd)


def remove_tree(dirfd: int, name: str, path: str, cancel: threading.Event | None = None) -> int:
    """Remove directory ``name`` under ``dirfd`` and everything in it; the count of
    entries removed (the directory included)."""
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            os.unlink(name, dir_fd=dirfd)  # became a link or a file: remove that, never follow it
            return 1
        raise errors.os_error(exc, path, "remove") from exc
    count = 0
    # Depth first, one fd per level: [fd, name in its parent, entries, next index, passes].
    stack: list[list] = []
    try:
        stack.append([top, name, [], 0, 0])
        stack[0][2] = _scan(top)
        while stack:
            if cancel is not None and cancel.is_set():
                raise FsError(f"removal of {path} was cancelled after {count} entries", path=path, code="cancelled")
            frame = stack[-1]
            fd, _, found, i, passes = frame
            if i < len(found):
                frame[3] = i + 1
                entry_name, is_dir = found[i]
                if is_dir:
                    try:
                        child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        # A link or file now, or gone: unlink below (never follow).
                        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                            raise errors.os_error(exc, path, "remove") from exc
                    else:
                        stack.append([child, entry_name, [], 0, 0])
                        stack[-1][2] = _scan(child)
                        continue
                try:
                    os.unlink(entry_name, dir_fd=fd)
                    count += 1
                except (FileNotFoundError, IsADirectoryError):
                    pass  # gone, or a directory now: the next pass sees it
                continue
            again = _scan(fd)
            if again and passes < MAX_PASSES:
                # Entries appeared while we emptied it: go again, a bounded number of times.
                frame[2], frame[3], frame[4] = again, 0, passes + 1
                continue
            stack.pop()
            os.close(fd)
            parent_fd = stack[-1][0] if stack else dirfd
            try:
                os.rmdir(frame[1], dir_fd=parent_fd)
                count += 1
            except FileNotFoundError:
                pass
            except NotADirectoryError:
                # Renamed away and replaced (by a link or a file) while we emptied it.
                raise FsError(
                    f"cannot finish removing {path}: the tree changed while it was removed (a directory inside was "
                    f"replaced); {count} entries were removed, nothing outside the tree was touched. To proceed: "
                    "look at what is left with walk and retry.", path=path, code="changed",
                    details={"entries_removed": count},
                ) from None
            except OSError as exc:
                raise errors.os_error(exc, path, "remove") from exc
    finally:
        for frame in stack:
            os.close(frame[0])
    return count


def delete_file(conf: Confinement, path: str) -> None:
    parent, name = conf.open_parent(path, need="write", action="delete")
    try:
        try:
            st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise FsError(
                    f"cannot delete {path}: it is a directory. To proceed: use remove with recursive=true.",
                    path=path, errno=errno.EISDIR,
                )
            os.unlink(name, dir_fd=parent.fd)
        except OSError as exc:
            raise errors.os_error(exc, path, "delete") from exc
    finally:
        os.close(parent.fd)

"""The fallback resolver for kernels without openat2: one ``openat(O_NOFOLLOW)`` per
component, from directory fds we hold.

``..`` pops our own stack (never ``openat("..")``, which a directory moved out of
the root would let escape); links are read and spliced into the components still
to walk, under the limits the kernel itself applies. The errors raised are the
ones openat2 would give (ELOOP, EXDEV), so :mod:`.resolve` explains both alike.
"""

from __future__ import annotations

import errno
import os
import stat

from .names import readlink_at
from .roots import O_CLOEXEC, O_DIR, O_NOFOLLOW, O_PATH, Root

MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
RETRIES = 8  # lookups of one component that keeps changing under us before giving up
MAX_STEPS = 4096  # components, links' texts included (the core's MAX_RESOLVE_STEPS: see there)


class TooLongAWay(OSError):
    """ELOOP for a way past MAX_LINKS links or MAX_STEPS components, as the kernel refuses it."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.ELOOP, f"the path takes {what} to resolve")
        self.what = what


class HiddenWay(Exception):
    """A link's way would look a name up inside a directory the policy hides (``refusal``
    says which rule): the answer, found or not, would tell what that directory holds."""

    def __init__(self, refusal) -> None:  # noqa: ANN001 - codespace.contract.Refused
        super().__init__(refusal.message)
        self.refusal = refusal


def walk(
    root: Root, rel: str, flags: int, follow_last: bool, follow_links: bool, hides=None,  # noqa: ANN001
) -> tuple[int, bool, str]:
    """An fd for ``rel`` beneath ``root`` opened with ``flags``, whether a link was
    followed on the way, and the path below the root it really reached. ``hides``
    (``PathRules.hides``): once a link has been followed, each lookup is asked first, and
    HiddenWay raised where it refuses (before the link, the way is the caller's own path,
    which the policy has judged whole)."""
    todo = [p for p in reversed(rel.split("/")) if p] if rel else []
    fds = [root.fd]
    names: list[str] = []
    followed = False
    links = steps = 0
    result = -1
    try:
        while todo:
            steps += 1
            if steps > MAX_STEPS:
                raise TooLongAWay(f"more than {MAX_STEPS} steps")
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if not names:
                    if root.is_fs_root:
                        continue
                    raise OSError(errno.EXDEV, "a symbolic link leads out of the root")
                os.close(fds.pop())
                names.pop()
                continue
            last = not todo
            cur = fds[-1]
            if followed and hides is not None:
                refusal = hides(root.join("/".join(names)), name)
                if refusal is not None:
                    raise HiddenWay(refusal)
            fd, target = _open_step(cur, name, flags, last, follow_last)
            if fd >= 0:
                if last and follow_last and flags & O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):
                    target = readlink_at(cur, name)
                    os.close(fd)
                    if target is None:  # pragma: no cover - replaced between open and readlink
                        raise OSError(errno.ENOENT, "the path changed while it was resolved")
                elif last:
                    result = fd
                    return fd, followed, "/".join([*names, name])
                else:
                    fds.append(fd)
                    names.append(name)
                    continue
            links = _splice_link(root, fds, names, todo, target, links, follow_links)
            followed = True
        # The path ended on a directory we hold (the root itself, or a link to "..").
        result = os.open(".", (flags & ~O_NOFOLLOW) | O_CLOEXEC, dir_fd=fds[-1])
        return result, followed, "/".join(names)
    finally:
        for fd in fds[1:]:
            if fd != result:
                os.close(fd)


def _open_step(cur: int, name: str, flags: int, last: bool, follow_last: bool) -> tuple[int, str | None]:
    """One component opened without following it: ``(fd, None)``, or ``(-1, its text)``
    for a link the walk is to follow."""
    step = (flags | O_NOFOLLOW if last else O_PATH | O_DIR | O_NOFOLLOW) | O_CLOEXEC
    for attempt in range(RETRIES):
        try:
            return os.open(name, step, dir_fd=cur), None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                target = os.readlink(name, dir_fd=cur)
            except OSError:
                # Not a link (any more). If it is a directory or a link now,
                # it was swapped between the two calls: look again. Anything
                # else (a file on the path) is the open's own error.
                if not _swapping_at(cur, name):
                    raise exc from None
                if attempt < RETRIES - 1:
                    continue
                break
            if last and not follow_last:
                raise
            return -1, target
    raise OSError(errno.EAGAIN, "the path kept changing while it was resolved") from None


def _splice_link(
    root: Root, fds: list[int], names: list[str], todo: list[str], target: str, links: int, follow_links: bool,
) -> int:
    """Put a link's text in place of the link among the components to walk; an
    absolute one restarts from the root. Returns the links followed so far."""
    if not follow_links:
        raise OSError(errno.ELOOP, "symbolic links are refused by policy")
    here = root.join("/".join(names))
    if here.startswith("/proc/"):
        # Links under /proc/<pid> are the kernel's magic links (fd/N, cwd,
        # root, exe): their text is not where they lead. Refuse, as
        # RESOLVE_NO_MAGICLINKS does.
        raise OSError(errno.ELOOP, "magic link under /proc")
    links += 1
    if links > MAX_LINKS:
        raise TooLongAWay(f"more than {MAX_LINKS} symbolic links")
    if target.startswith("/"):
        if not root.is_fs_root:
            raise OSError(errno.EXDEV, "an absolute symbolic link leaves the root")
        while len(fds) > 1:
            os.close(fds.pop())
        names.clear()
    todo.extend(p for p in reversed(target.split("/")) if p)
    return links


def _swapping_at(dirfd: int, name: str) -> bool:
    """After open said "not a directory" or "a link" and readlink said "no link":
    whether ``name`` is a directory or a link *now*, i.e. changing under us."""
    try:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
    except OSError:
        return True  # gone: changed under us too
    return stat.S_ISDIR(mode) or stat.S_ISLNK(mode)

"""rg's view of a searched directory: the same tree, on a mount that follows no symbolic link.

Runs in rg's child, between fork and exec (``preexec_fn``); :func:`available` is asked in
the server, once.

rg walks by name: it reads a directory's entries, then opens each subdirectory by its name
under the directory it searches. A subdirectory swapped for a link between the two (any
command in the workspace can swap one in a loop) was followed, and rg searched where the
link led: outside the workspace, or a path the policy hides (a red-team run got an outside
file's lines in 3 of 463 searches). rg follows no link of its own accord here, so a tree in
which the kernel follows none changes no answer and closes the race. In a mount namespace
of its own (private: nothing reaches the host's), rg's child clones the mounts under its
working directory (the directory grep opened and checked) with ``open_tree``, sets
``nosymfollow`` on all of them (``mount_setattr``), attaches the clone on that very
directory (by descriptor: no path is resolved) and starts in it. A link there fails with
ELOOP, whatever it was when rg read the entries.

A server that is not root has no CAP_SYS_ADMIN for that: its rg first enters a user
namespace of its own too, mapping only its own uid and gid (files keep their owners; rg
runs with no capability once it execs). Linux 5.12 or later; where the kernel or the host's rules refuse (no unprivileged user namespaces),
:func:`available` says why and grep runs rg as before, logging it once.
"""

from __future__ import annotations

import ctypes
import os

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # one number on every architecture (>= 424)
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x04, 0x40
MS_REC, MS_PRIVATE = 0x4000, 0x40000
AT_EMPTY_PATH, AT_RECURSIVE = 0x1000, 0x8000
MOUNT_ATTR_NOSYMFOLLOW = 0x00200000
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter() -> None:
    """Make this process's working directory the no-link clone of itself (raises OSError)."""
    flags = CLONE_NEWNS
    if os.geteuid() != 0:
        flags |= CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(flags), "unshare")
    if flags & CLONE_NEWUSER:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # Nothing of what follows may reach the host's mount table (root's namespace copy shares it).
    _check(_libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount(MS_PRIVATE)")
    here = os.open(".", os.O_PATH | os.O_CLOEXEC)
    try:
        tree = _check(_libc.syscall(ctypes.c_long(SYS_OPEN_TREE), ctypes.c_int(-100), b".",
                                    ctypes.c_uint(OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC)), "open_tree")
        try:
            attr = _MountAttr(MOUNT_ATTR_NOSYMFOLLOW, 0, 0, 0)
            _check(_libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(tree), b"",
                                 ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE), ctypes.byref(attr),
                                 ctypes.c_size_t(ctypes.sizeof(attr))), "mount_setattr")
            # Attached on the very directory (its descriptor, no path to resolve): rg asks for its
            # working directory's name, which a detached clone has none of.
            _check(_libc.syscall(ctypes.c_long(SYS_MOVE_MOUNT), ctypes.c_int(tree), b"", ctypes.c_int(here), b"",
                                 ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)), "move_mount")
            os.fchdir(tree)
        finally:
            os.close(tree)
    finally:
        os.close(here)


_available: str | None | bool = False  # False: not asked yet


def available() -> str | None:
    """None when :func:`enter` works here, else why not (asked once, in a child process)."""
    global _available
    if _available is False:
        _available = _probe()
    return _available  # type: ignore[return-value]


def _probe() -> str | None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            enter()
            message = b""
        except OSError as exc:
            message = str(exc).encode()[:500]
        except BaseException as exc:  # noqa: BLE001 - whatever happens, the child only reports it
            message = repr(exc).encode()[:500]
        os.write(write, message)
        os._exit(0)
    os.close(write)
    try:
        answer = b""
        while chunk := os.read(read, 1024):
            answer += chunk
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    return answer.decode("utf-8", "replace") or None

"""The two Linux calls Python's ``os`` module lacks: ``openat2`` and ``renameat2``.

Both go through ``ctypes`` on the C library already loaded in the process, so
the plugin needs no compiled extension. Each is probed once; callers fall back
(component-by-component ``openat``, check-then-``renameat``) when the kernel or
the file system says no.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

# include/uapi/linux/openat2.h
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

RENAME_NOREPLACE = 1 << 0

# openat2 has the same number on every architecture (it was added after the
# syscall tables were unified); only a few exotic ones differ.
_SYS_OPENAT2 = {"alpha": 547}.get(platform.machine(), 437)

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    _renameat2.restype = ctypes.c_int


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_HOW_SIZE = ctypes.sizeof(_OpenHow)


def openat2(dirfd: int, path: bytes, flags: int, resolve: int, mode: int = 0) -> int:
    """``openat2(2)``; raises OSError like ``os.open``.

    EAGAIN (a concurrent rename somewhere in the system made a RESOLVE_BENEATH
    lookup unsure) is retried here a few times, as the man page advises.
    """
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    for _ in range(16):
        fd = _syscall(_SYS_OPENAT2, dirfd, path, ctypes.byref(how), _HOW_SIZE)
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), os.fsdecode(path))
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), os.fsdecode(path))


def openat2_available() -> tuple[bool, str]:
    """Whether openat2 with RESOLVE_BENEATH works here, and why not."""
    try:
        fd = openat2(-100, b"/", os.O_PATH | os.O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)  # AT_FDCWD
    except OSError as exc:
        # An absolute path with RESOLVE_BENEATH must fail with EXDEV: that proves the
        # flag is understood. ENOSYS (old kernel) or EPERM (seccomp) mean no openat2.
        if exc.errno == errno.EXDEV:
            return True, "openat2 with RESOLVE_BENEATH works"
        return False, f"openat2 failed with {errno.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})"
    os.close(fd)
    return False, "openat2 ignored RESOLVE_BENEATH (an absolute path was accepted)"


def renameat2(src_dirfd: int, src: bytes, dst_dirfd: int, dst: bytes, flags: int) -> None:
    """``renameat2(2)``; OSError(ENOSYS) when the C library lacks it."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available in this C library")
    if _renameat2(src_dirfd, src, dst_dirfd, dst, flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(dst))


def syncfs(fd: int) -> None:
    """Flush the file system holding ``fd`` (one call for many unflushed writes)."""
    if _libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))

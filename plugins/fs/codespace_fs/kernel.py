"""The two Linux calls Python's ``os`` module lacks: ``openat2`` and ``renameat2``.

Both go through ``_ctypes`` (the extension under ``ctypes``, without the package's
type catalogue, struct and endianness modules: the patch helper is a one-shot process
that pays for every import) on the C library already loaded in the process, so the
plugin needs no compiled extension of its own. Each is probed once; callers fall back
(component-by-component ``openat``, check-then-``renameat``) when the kernel or
the file system says no.
"""

from __future__ import annotations

import _ctypes
import errno
import os
import sys

# include/uapi/linux/openat2.h
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

RENAME_NOREPLACE = 1 << 0

# openat2 has the same number on every architecture (it was added after the
# syscall tables were unified); only a few exotic ones differ.
_SYS_OPENAT2 = {"alpha": 547}.get(os.uname().machine, 437)  # os.uname: the platform module costs ~3 ms to load

class _Long(_ctypes._SimpleCData):
    _type_ = "l"


class _IntFunction(_ctypes.CFuncPtr):  # an int result (_ctypes' default); plain ints pass as C ints, bytes as pointers
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO


class _LongFunction(_ctypes.CFuncPtr):
    _flags_ = _IntFunction._flags_
    _restype_ = _Long


_LIBC = _ctypes.dlopen(None)  # the C library already loaded in the process


def _function(kind: type, name: str):  # noqa: ANN202
    try:
        return kind(_ctypes.dlsym(_LIBC, name))
    except OSError:  # not in this C library
        return None


_syscall = _function(_LongFunction, "syscall")
_renameat2 = _function(_IntFunction, "renameat2")
_syncfs = _function(_IntFunction, "syncfs")


def _open_how(flags: int, mode: int, resolve: int) -> bytes:
    """``struct open_how``: three native-endian u64 (flags, mode, resolve)."""
    return b"".join(v.to_bytes(8, sys.byteorder) for v in (flags, mode, resolve))


_HOW_SIZE = 24


def openat2(dirfd: int, path: bytes, flags: int, resolve: int, mode: int = 0) -> int:
    """``openat2(2)``; raises OSError like ``os.open``.

    EAGAIN (a concurrent rename somewhere in the system made a RESOLVE_BENEATH
    lookup unsure) is retried here a few times, as the man page advises.
    """
    how = _open_how(flags | os.O_CLOEXEC, mode, resolve)
    # syscall(2) is variadic and reads every argument as a long: pass them as longs.
    args = (_Long(_SYS_OPENAT2), _Long(dirfd), path, how, _Long(_HOW_SIZE))
    for _ in range(16):
        fd = _syscall(*args)
        if fd >= 0:
            return fd
        err = _ctypes.get_errno()
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
        err = _ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(dst))


def syncfs(fd: int) -> None:
    """Flush the file system holding ``fd`` (one call for many unflushed writes)."""
    if _syncfs is None:
        raise OSError(errno.ENOSYS, "syncfs is not available in this C library")
    if _syncfs(fd) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, os.strerror(err))

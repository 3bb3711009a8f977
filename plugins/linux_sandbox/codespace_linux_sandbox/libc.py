"""The few libc calls the helper processes need, through ``_ctypes`` directly.

``import ctypes`` costs a few milliseconds (it pulls in ``os``, ``struct``, ``types``...)
on every sandboxed command; the C core of ctypes alone is a fraction of that and is all
that calling ``prctl``/``flock``/``setns`` with integer and buffer arguments needs (the core's
process hardening, :mod:`codespace.contract.hardening`, does the same for itself).
Arguments are C ints unless wrapped in :class:`Long`; ``bytes`` arrive as pointers.
The Landlock engine, which builds structs, uses full ``ctypes`` instead.
"""


import _ctypes
import posix
import sys

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = 1, 2, 4, 8
CLONE_PARENT = 0x00008000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 0x00000001, 0x00100000
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # the same numbers on x86_64 and aarch64
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)
SIGCHLD = 17
RLIMIT_NPROC = 6
SYS_CLONE = {"x86_64": 56, "aarch64": 220}


class Int(_ctypes._SimpleCData):
    _type_ = "i"


class Long(_ctypes._SimpleCData):
    _type_ = "l"


class _Process:
    _handle = _ctypes.dlopen(None)


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = Int


class _HoldingTheGil(_ctypes.CFuncPtr):
    # clone() must run with the GIL held: the child resumes inside this call and must find
    # the interpreter exactly as the parent left it (single thread, GIL taken).
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO | _ctypes.FUNCFLAG_PYTHONAPI
    _restype_ = Long


prctl = _Function(("prctl", _Process))
flock = _Function(("flock", _Process))
setns = _Function(("setns", _Process))
unshare = _Function(("unshare", _Process))
ioctl = _Function(("ioctl", _Process))
mount = _Function(("mount", _Process))
syscall = _Function(("syscall", _Process))
prlimit = _Function(("prlimit", _Process))
_syscall = _HoldingTheGil(("syscall", _Process))


def errno() -> int:
    return _ctypes.get_errno()


def limit_processes(pid: int, count: int) -> None:
    """RLIMIT_NPROC of ``pid``, soft and hard, to ``count`` (what it forks inherits it)."""
    value = count.to_bytes(8, sys.byteorder)  # struct rlimit: rlim_cur, rlim_max (64-bit)
    if prlimit(pid, RLIMIT_NPROC, value + value, None) != 0:
        raise OSError(errno(), f"prlimit(RLIMIT_NPROC) failed: {posix.strerror(errno())}")


def clone_parent() -> int:
    """fork(), except that the child's parent is our own parent (``CLONE_PARENT``): 0 in the
    child, its pid in the caller. The raw system call skips Python's and glibc's fork
    bookkeeping, so only a single-threaded caller that holds no locks may use it (the
    zygote's main loop); glibc >= 2.34 resolves its own thread id for ``raise()``."""
    number = SYS_CLONE[posix.uname().machine]
    pid = _syscall(Long(number), Long(CLONE_PARENT | SIGCHLD), Long(0), Long(0), Long(0), Long(0))
    if pid < 0:
        raise OSError(errno(), f"clone(CLONE_PARENT) failed: {posix.strerror(errno())}")
    return pid

"""The few libc calls the helper needs, through ``_ctypes`` directly.

``import ctypes`` costs a few milliseconds (it pulls in ``os``, ``struct``, ``types``...)
on every sandboxed command; the C core of ctypes alone is a fraction of that and is all
that calling ``prctl``/``setrlimit``/``flock`` with integer and buffer arguments needs.
Arguments are C ints unless wrapped in :class:`Long`; ``bytes`` arrive as pointers.
The Landlock engine, which builds structs, uses full ``ctypes`` instead.
"""


import _ctypes

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
RLIMIT_CORE = 4
LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = 1, 2, 4, 8


class Int(_ctypes._SimpleCData):
    _type_ = "i"


class Long(_ctypes._SimpleCData):
    _type_ = "l"


class _Process:
    _handle = _ctypes.dlopen(None)


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = Int


prctl = _Function(("prctl", _Process))
setrlimit = _Function(("setrlimit", _Process))
flock = _Function(("flock", _Process))


def errno() -> int:
    return _ctypes.get_errno()

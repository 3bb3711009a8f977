"""Process hardening for the helper processes CodeSpace starts for itself (DESIGN.md §6).

Upstream's ``codex-process-hardening``, once, for every such process (the patch helper, the
sandbox helpers, later the worker). Each calls :func:`harden_process` before it touches
anything an operator may not want in a core dump or readable by a same-uid process:

- non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): no ptrace attach, no ``/proc/<pid>/mem``
  by same-uid processes, no core dump;
- ``RLIMIT_CORE`` 0;
- ``LD_*`` removed from the process's own environment, so nothing it starts is steered by
  a dynamic-linker variable inherited from the agent's environment.

Failure is fatal: :class:`HardeningError` carries upstream's exit code for the step that
failed, and the process exits with it without doing its work.

Stable (part of the plugin API, versioned with ``codespace.contract``): :func:`harden_process`,
:func:`remove_ld_variables`, :class:`HardeningError`, :data:`PRCTL_FAILED_EXIT_CODE`,
:data:`SET_RLIMIT_CORE_FAILED_EXIT_CODE`.

Cheap on purpose: the helpers are one-shot ``python -I -S`` processes, where every import
shows in the time a command takes. So this module imports only the interpreter's built-in
``posix``, calls libc through ``_ctypes`` (``import ctypes`` also loads ``os``, ``struct``,
``types``...: several times the cost) and imports nothing of its package: the sandbox
helper, which runs without the core on its import path, loads this file by its path.
Keep it that way.
"""

import posix

PRCTL_FAILED_EXIT_CODE = 5
SET_RLIMIT_CORE_FAILED_EXIT_CODE = 7

_PR_SET_DUMPABLE = 4
_RLIMIT_CORE = 4
_RLIMIT_ZERO = bytes(16)  # struct rlimit {rlim_cur = 0, rlim_max = 0}


class HardeningError(Exception):
    """A hardening step failed; ``exit_code`` is upstream's code for that step."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def harden_process() -> None:
    """Make this process non-dumpable, without core dumps and free of ``LD_*`` variables;
    raises :class:`HardeningError`.

    Loading the FFI is the costly part (about a millisecond): it happens here, not at
    import, so a caller can overlap it with other work (the sandbox helper does it while
    bubblewrap builds the sandbox)."""
    prctl, setrlimit, errno = _libc()
    if prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise HardeningError(f"prctl(PR_SET_DUMPABLE, 0) failed: {posix.strerror(errno())}", PRCTL_FAILED_EXIT_CODE)
    if setrlimit(_RLIMIT_CORE, _RLIMIT_ZERO) != 0:
        raise HardeningError(f"setrlimit(RLIMIT_CORE, 0) failed: {posix.strerror(errno())}",
                             SET_RLIMIT_CORE_FAILED_EXIT_CODE)
    remove_ld_variables()


def remove_ld_variables() -> None:
    """Remove every ``LD_*`` variable from this process's environment (``os.environ`` shares
    ``posix.environ``, so it sees the change)."""
    for key in [k for k in posix.environ if k.startswith(b"LD_")]:
        posix.unsetenv(key)
        del posix.environ[key]


def _libc():
    import _ctypes

    # C ints in, a C int out: _ctypes' default result, so no class for the result type (each
    # class made costs a one-shot helper tens of microseconds). ``bytes`` arguments pass as pointers.
    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO

    libc = _ctypes.dlopen(None)
    return Function(_ctypes.dlsym(libc, "prctl")), Function(_ctypes.dlsym(libc, "setrlimit")), _ctypes.get_errno

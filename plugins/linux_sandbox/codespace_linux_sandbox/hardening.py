"""Process hardening of the helper (upstream ``codex-process-hardening``).

The helper outlives bubblewrap's set-up: it supervises the command and removes the
placeholders afterwards, holding the command's whole environment meanwhile. So it makes
itself non-dumpable (no ptrace attach or /proc/<pid>/mem by same-uid processes, no core),
sets ``RLIMIT_CORE`` to 0 and removes ``LD_*`` from its own environment. The command's
environment travels in the handshake and is untouched. Failure is fatal, with upstream's
exit codes.
"""


import posix

PRCTL_FAILED_EXIT_CODE = 5
SET_RLIMIT_CORE_FAILED_EXIT_CODE = 7


class HardeningError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def harden_self() -> None:
    from . import (
        libc,  # the FFI import is the costly part: callers overlap it with bwrap's set-up
    )

    if libc.prctl(libc.PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise HardeningError(f"prctl(PR_SET_DUMPABLE, 0) failed: {posix.strerror(libc.errno())}", PRCTL_FAILED_EXIT_CODE)
    if libc.setrlimit(libc.RLIMIT_CORE, bytes(16)) != 0:  # struct rlimit {0, 0}
        raise HardeningError(f"setrlimit(RLIMIT_CORE, 0) failed: {posix.strerror(libc.errno())}",
                             SET_RLIMIT_CORE_FAILED_EXIT_CODE)
    remove_ld_variables()


def remove_ld_variables() -> None:
    for key in [k for k in posix.environ if k.startswith(b"LD_")]:
        posix.unsetenv(key)
        del posix.environ[key]

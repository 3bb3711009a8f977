"""Start-up hardening of the helper process (DESIGN.md §6).

The helper handles file contents an operator may not want in a core dump or
readable through ptrace by a same-uid process, and must not be steered by a
dynamic-linker variable inherited from the agent's environment. If hardening
fails the helper does not run: each failure has its own exit code.
"""

from __future__ import annotations

import os
import resource

PR_SET_DUMPABLE = 4
EXIT_PRCTL_FAILED = 5
EXIT_RLIMIT_FAILED = 7


class HardeningError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def harden() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise HardeningError(f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(err)}", EXIT_PRCTL_FAILED)
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError) as exc:
        raise HardeningError(f"setrlimit(RLIMIT_CORE, 0) failed: {exc}", EXIT_RLIMIT_FAILED) from exc
    for name in [n for n in os.environ if n.startswith("LD_")]:
        del os.environ[name]

"""Non-blocking descriptor I/O on the event loop, shared by the host and terminal backends.

Everything here waits with ``anyio.wait_readable`` / ``wait_writable`` instead of
a worker thread, so a running command costs no thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
from functools import cache

import anyio

PR_SET_PDEATHSIG = 1


async def read_some(fd: int, size: int) -> bytes:
    """The next bytes available on a non-blocking ``fd`` (b"" at end of file)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await anyio.wait_readable(fd)


async def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a non-blocking ``fd`` in order (BrokenPipeError if the reader left)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await anyio.wait_writable(fd)


async def wait_exit(pid: int, pidfd: int) -> int:
    """Wait (on a pidfd) for child ``pid`` to end and reap it: its code, or -N for signal N."""
    await anyio.wait_readable(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


@cache
def _prctl():  # noqa: ANN202
    return ctypes.CDLL(None, use_errno=True).prctl


# Dispositions a launcher commonly leaves ignored (nohup, a shell's background job, Python itself):
# ignored survives exec, so a command would inherit it (^C doing nothing in a terminal).
_RESET = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGTERM, signal.SIGXFSZ,
          signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD)


def reset_signals() -> None:
    """In a child between fork and exec: default dispositions and nothing blocked, so a command
    behaves the same however the server was started."""
    for signum in _RESET:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def arm_parent_death_signal(parent_pid: int) -> None:
    """In a child between fork and exec: SIGTERM when the server dies. Re-checked after
    arming, because the parent may have died before the signal was set."""
    _prctl()(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)

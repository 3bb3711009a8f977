"""Clean-ups that may finish after the server has exited, run by a detached child.

At a clean stop over stdio the client waits for the server's exit (Claude Code allows
100 ms before SIGTERM, then kills it). The sandbox's clean-up after its last command
(removing the empty mount-point directories it made for missing protected names) is
filesystem work nobody waits on: on ext4 mounted with ``discard`` and no journal, each
removed directory frees a block with a synchronous discard, 0.2-3 ms apiece, 4-60 ms for
the usual twenty-odd (benchmarks/README.md, "Shutdown over stdio"). The server hands
that work to a forked child and exits; the child finishes it and exits in turn. If the
child is killed first, the next server's start sweeps what is left, as it does after a
crash.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)


def run_detached(cleanups: list[Callable[[], None]]) -> int | None:
    """Run ``cleanups`` in a forked child in a session of its own; the child's pid, or None
    if no child could be made (then they ran here, before returning)."""
    if not cleanups:
        return None
    try:
        # The child starts once the server is gone (end of file on this pipe): until then the
        # clean-up would compete with the server's last steps for the CPU and the disk.
        gone, _held = os.pipe()  # both non-inheritable: no command started later holds them
        pid = os.fork()
    except OSError:
        log.warning("cannot fork the clean-up child; cleaning up before the exit")
        _run_all(cleanups)
        return None
    if pid:
        os.close(gone)
        _KEPT.append(_held)  # open until this process exits
        return pid
    try:
        os.setsid()  # a signal to the server's process group must not cut the clean-up short
        # Nothing of the server's: the client sees end of file on the server's output at its
        # exit, and a terminal's master or a pidfd held here would outlive the server.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, gone)
        os.closerange(gone + 1, _fd_limit())
        while os.read(gone, 1):
            pass
        _run_all(cleanups)
    finally:
        os._exit(0)


_KEPT: list[int] = []  # write ends of the pipes the clean-up children wait on


def _run_all(cleanups: list[Callable[[], None]]) -> None:
    for cleanup in cleanups:
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - one failed clean-up must not skip the others
            pass


def _fd_limit() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 65536

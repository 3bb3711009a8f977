"""Run rg and hand its JSON records over one by one, bounded and stoppable.

Records are read with a ceiling: rg prints a whole line per match, so one huge line
(a minified bundle) would otherwise become one huge allocation here. A record
longer than ``max_record`` is dropped as it streams past and reported instead.
rg leads its own process group, so stopping it (cancel, time-out, the budget reached)
kills everything it started. A group, not a session: with the kernel's autogroup
scheduling a new session is a new scheduling group, and rg in one ran measurably slower
on a loaded machine than in ours (benchmarks/README.md, grep).
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

MAX_RECORD = 4 * 1024 * 1024
_CHUNK = 1 << 20
_F_SETPIPE_SZ = 1031
_END = b'\n{"type":"end"'
_MAX_ERRORS = 50
_EAGER_WAKEUPS = 16  # a small search ends within these: read at once, no added latency
_BATCH_SECONDS = 0.005
_QUIET_CHECK_S = 0.2  # how long rg may stay silent before we look at what it waits for
MEMORY_LIMIT = 1 << 30
"""rg's heap (RLIMIT_DATA; the files it maps are not counted), about 6 MiB for a search here.
A .gitignore of 300,000 patterns (6.7 MB, which any command can write) took rg 110 s and
6.5 GB; with the limit it fails in seconds with an allocation error (:data:`OUT_OF_MEMORY`)."""
OUT_OF_MEMORY = b"memory allocation of "


def _grow_pipe(fd: int) -> None:
    """A 1 MiB pipe instead of 64 KiB: fewer switches between rg writing and us reading."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass  # above /proc/sys/fs/pipe-max-size for this user: the default size works too


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


class Stopped(Exception):
    """The search was stopped: ``reason`` is 'cancelled' or 'timeout' (from outside), or
    'fifo': rg waits to open a FIFO (a ``.gitignore`` made one), which no writer will ever open."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RgRun:
    """One rg process. Iterate :meth:`records`; call :meth:`stop` when done with it."""

    def __init__(self, argv: list[str], *, cwd: str, stdin: int, deadline: float,
                 cancel: threading.Event | None, max_record: int = MAX_RECORD,
                 before_exec: Callable[[], None] | None = None) -> None:
        self.deadline = deadline
        self.cancel = cancel
        self.max_record = max_record
        self.errors: list[str] = []
        self.failure: list[bytes] = []  # rg's messages: files it could not read, a bad regex
        self.proc = subprocess.Popen(
            argv, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={},
            process_group=0, close_fds=True, preexec_fn=before_exec,
        )
        self._stderr = threading.Thread(target=self._read_stderr, name="rg-stderr", daemon=True)
        self._stderr.start()
        # Set from here, not between fork and exec: a preexec step would cost a single-file
        # search the fork that vfork spares it; rg has allocated next to nothing by now.
        try:
            resource.prlimit(self.proc.pid, resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))
        except OSError as exc:  # rg ended already, or this host refuses: search as before
            _warn_once(f"grep: cannot limit rg's memory ({exc.strerror}); it runs without the limit")

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            if len(self.failure) < _MAX_ERRORS:
                self.failure.append(line.rstrip(b"\n")[:2000])

    def records(self, on_oversize: Callable[[], None], skipping: Callable[[], bool],
                pass_over: Callable[[bytes, int], int] | None = None) -> Iterator[bytes]:
        """rg's stdout, one JSON line at a time; raises :class:`Stopped`. After a record for
        which ``skipping()`` is true, the records up to the file's ``end`` are passed over
        unread: one search of the buffer instead of a line each. Before each record,
        ``pass_over(buf, pos)`` may pass over whole files in bulk and answer where to go on."""
        fd = self.proc.stdout.fileno()
        _grow_pipe(fd)
        buf = b""
        dropping = skip = False
        wakeups = 0
        heard = time.monotonic()
        while True:
            self._check_stop()
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                if time.monotonic() - heard > _QUIET_CHECK_S:
                    if self._waits_on_fifo():
                        raise Stopped("fifo")
                    heard = time.monotonic()
                continue
            heard = time.monotonic()
            wakeups += 1
            if wakeups > _EAGER_WAKEUPS:
                # A long search: rg writes each file's records as it finishes the file, about
                # one write a millisecond, and reading each at once costs a wakeup and a pass
                # of this loop per file on CPUs rg's threads need. Let a few collect first.
                time.sleep(_BATCH_SECONDS)
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return
            if dropping:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                dropping, chunk = False, chunk[newline + 1:]
            buf = buf + chunk if buf else chunk
            pos = 0
            while True:
                if skip:
                    # A record never holds a raw newline (JSON escapes it), so this is the next end.
                    at = buf.find(_END, max(pos - 1, 0))
                    if at < 0:
                        pos = max(pos, len(buf) - len(_END) + 1)
                        break
                    pos, skip = at + 1, False
                elif pass_over is not None:
                    pos = pass_over(buf, pos)
                newline = buf.find(b"\n", pos)
                if newline < 0:
                    break
                yield buf[pos:newline]
                pos = newline + 1
                skip = skipping()
            buf = buf[pos:]
            if not skip and len(buf) > self.max_record:
                buf, dropping = b"", True
                on_oversize()

    def _waits_on_fifo(self) -> bool:
        """Is one of rg's threads blocked opening a FIFO (the kernel's ``wait_for_partner``)?
        rg opens every ``.gitignore`` it meets, and an agent can make one a FIFO: without
        this, the search waited out its whole timeout and answered nothing."""
        try:
            tasks = os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return False
        for tid in tasks:
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/wchan", encoding="ascii", errors="replace") as f:
                    if f.read().strip() == "wait_for_partner":
                        return True
            except OSError:
                continue
        return False

    def _check_stop(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Stopped("cancelled")
        if time.monotonic() > self.deadline:
            raise Stopped("timeout")

    def stop(self, *, kill: bool) -> int:
        """Reap rg (killing its process group first when ``kill``: it was stopped early) and
        return its exit status."""
        if kill and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        status = self.proc.wait()
        self.proc.stdout.close()
        self._stderr.join(timeout=5)
        self.proc.stderr.close()
        return status

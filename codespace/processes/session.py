"""One running (or finished) command: its output buffers, cursors, exit and yield logic."""

from __future__ import annotations

import codecs
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ..contract import ToolError
from ..procfs import ProcRow
from .buffer import OutputBuffer, complete_utf8_prefix
from .kill import descendants, kill_session, kill_tree, members
from .tracking import populated, signal_group

DRAIN_AFTER_EXIT_S = 2.0  # grandchildren may keep the pipes open after the leader exits
TIMEOUT_EXIT_CODE = 124


class ProcessHandle(Protocol):
    pid: int

    async def write(self, data: bytes) -> None: ...
    def resize(self, rows: int, cols: int) -> None: ...
    def signal_group(self, signum: int) -> None: ...
    async def wait(self) -> int: ...
    def close(self) -> None: ...


@dataclass
class Taken:
    """Output handed to a client by one call."""

    text: str
    start: int
    end: int
    dropped: int
    stderr_text: str | None = None
    stderr_end: int | None = None
    stderr_dropped: int = 0


def _take(buffer: OutputBuffer, cursor: int, max_bytes: int) -> tuple[str, int, int, int]:
    """Up to ``max_bytes`` from ``cursor`` across the head/tail gap, as text cut on a
    character boundary: (text, start, end, bytes dropped)."""
    parts: list[str] = []
    start: int | None = None
    dropped = 0
    position = cursor
    while max_bytes > 0:
        window = buffer.read(position, max_bytes)
        if not window.data:
            break
        keep = complete_utf8_prefix(window.data)
        if keep == 0:  # one character wider than max_bytes, or the cursor could never move
            window = buffer.read(position, max_bytes + 3)
            keep = complete_utf8_prefix(window.data)
        if buffer.eof and window.end == buffer.total:
            keep = len(window.data)  # nothing more will come to complete a character
        if keep == 0:
            break
        if window.dropped:
            parts.append(f"... {window.dropped} bytes omitted ...\n")
            dropped += window.dropped
        parts.append(codecs.decode(window.data[:keep], "utf-8", "replace"))
        start = window.start if start is None else start
        position = window.start + keep
        max_bytes -= keep
        if keep < len(window.data):
            break
    return "".join(parts), cursor if start is None else start, position, dropped


@dataclass
class Session:
    id: str
    process: ProcessHandle
    argv: list[str]
    tty: bool
    interactive: bool
    operation_id: str | None
    out: OutputBuffer
    err: OutputBuffer | None
    readers: list[tuple[OutputBuffer, Callable[[], Awaitable[bytes]]]]
    timeout_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    returncode: int | None = None
    timed_out: bool = False
    terminated_by: str | None = None
    detached: bool = False
    sandboxed: bool = False
    delivered: int = 0
    delivered_err: int = 0
    finished: anyio.Event = field(default_factory=anyio.Event)
    exited: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set after ``on_finish`` returned: the end of the session is recorded."""
    ended_at: float | None = None
    on_finish: Callable[[Session], Awaitable[None]] | None = None
    group: Any = None  # the command's cgroup (a Path), when processes are tracked by cgroup
    # The leader is a subreaper holding every descendant (the keeper, or a sandbox helper):
    # a SIGKILL goes to its descendants first, since once it is dead they would go to init.
    keeper: bool = False
    _activity: anyio.Event = field(default_factory=anyio.Event)
    _last_output: float = 0.0
    _scope: anyio.CancelScope | None = None
    _writers: Counter[OutputBuffer] = field(default_factory=Counter)
    """Streams still being read into each buffer."""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return not self.exited.is_set()

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # -- lifecycle ----------------------------------------------------------------

    async def run(self) -> None:
        """Own the process until it is gone: read every stream, wait, enforce the timeout.

        Shielded: when the server's tasks are cancelled (a signal stops it) a live command
        must still be waited for, so that its record says how it ended. The registry ends
        sessions by ending their processes, and abandons a session (:meth:`abandon`) only
        after it has killed what was left."""
        with anyio.CancelScope(shield=True) as self._scope:
            try:
                self._writers = Counter(buffer for buffer, _ in self.readers)
                async with anyio.create_task_group() as tg:
                    for buffer, read in self.readers:
                        tg.start_soon(self._pump, buffer, read)
                    if self.timeout_s is not None:
                        tg.start_soon(self._watchdog, self.timeout_s)
                    self.returncode = await self.process.wait()
                    self.exited.set()
                    self._poke()
                    await self._drain()
                    tg.cancel_scope.cancel()
            finally:
                for buffer, _ in self.readers:
                    buffer.close()
                self.process.close()
                self.ended_at = time.monotonic()
                self.finished.set()
                self._poke()
                if self.on_finish is not None:
                    await self.on_finish(self)
                self.settled.set()

    def abandon(self) -> None:
        """Stop waiting for the process (the server is stopping and has killed it already)."""
        if self._scope is not None:
            self._scope.cancel()

    async def _drain(self) -> None:
        """After exit, read what is left; give up after DRAIN_AFTER_EXIT_S of a pipe held
        open by a grandchild, but never while a lossless reader waits for the client, nor
        sooner than DRAIN_AFTER_EXIT_S after the client freed room: the pump it released
        may not have run yet, and the pipe may still hold what the command wrote."""
        deadline = time.monotonic() + DRAIN_AFTER_EXIT_S
        while not all(buffer.eof for buffer, _ in self.readers):
            now = time.monotonic()
            for buffer, _ in self.readers:
                held = now if not buffer.has_room() else buffer.held_at
                deadline = max(deadline, held + DRAIN_AFTER_EXIT_S)
            left = deadline - now
            if left <= 0:
                return
            event = self._activity
            with anyio.move_on_after(left):
                await event.wait()

    async def _pump(self, buffer: OutputBuffer, read: Callable[[], Awaitable[bytes]]) -> None:
        try:
            while True:
                await buffer.wait_for_room()
                chunk = await read()
                if not chunk:
                    return
                buffer.append(chunk)
                self._last_output = time.monotonic()
                self._poke()
        finally:
            # stdout and stderr may share a buffer: it ends with the last of its streams
            self._writers[buffer] -= 1
            if not self._writers[buffer]:
                buffer.close()
            self._poke()

    async def _watchdog(self, timeout_s: float) -> None:
        await anyio.sleep(timeout_s)
        if self.running:
            self.timed_out = True
            self.kill(signal.SIGKILL)

    def _poke(self) -> None:
        self._activity.set()
        self._activity = anyio.Event()

    def kill(self, signum: int, procs: list[ProcRow] | None = None) -> None:
        """Signal the whole process group and session, and everything in the command's cgroup
        (which a process cannot leave by ``setsid``). ``procs``: a process table taken once
        for several sessions."""
        if self.keeper and signum == signal.SIGKILL:
            kill_tree(self.pid)  # while the keeper lives, orphans come back to it, never to init
        try:
            kill_session(self.pid, signum, procs)
        except ValueError:
            self.process.signal_group(signum)
        signal_group(self.group, signum)

    def leftovers(self, procs: list[ProcRow] | None = None) -> bool:
        """Is any process the command started still alive?"""
        return (bool(members(self.pid, procs)) or populated(self.group)
                or (self.keeper and bool(descendants(self.pid, procs))))

    async def terminate(self, signum: int, grace_s: float) -> None:
        """``signum`` to everything, then SIGKILL after ``grace_s`` if anything is left."""
        self.terminated_by = signal.Signals(signum).name
        self.kill(signum)
        with anyio.move_on_after(grace_s):
            await self.exited.wait()
        if self.running or self.leftovers():
            self.kill(signal.SIGKILL)
        with anyio.move_on_after(DRAIN_AFTER_EXIT_S + 1):
            await self.finished.wait()

    # -- what a client asks of it ----------------------------------------------------

    async def feed_stdin(self, text: str, *, close: bool) -> None:
        """Write the text exec was given for stdin; ``close`` ends stdin afterwards."""
        await self.process.write(text.encode())
        if close and hasattr(self.process, "close_stdin"):  # a terminal has no stdin of its own to close
            self.process.close_stdin()

    async def send(self, chars: str) -> None:
        """Write to the running command's stdin or terminal."""
        if not self.running:
            raise ToolError(f"session {self.id} has exited; read_output returns what is left", code="exited")
        await self.process.write(chars.encode())

    def resize(self, rows: int, cols: int) -> None:
        if not self.tty:
            raise ToolError(f"session {self.id} is not a terminal; only tty=true sessions can be resized",
                            code="not_a_terminal")
        self.process.resize(rows, cols)

    def detach(self) -> None:
        """The exec call returned while the command still runs: the registry finishes its
        operation record when it ends."""
        self.detached = True

    def still_needed(self) -> bool:
        """Must the registry keep it? While it runs, until it has finished, and while output is
        left unread; after that nothing can be asked of it."""
        return self.running or self.has_unread() or not self.finished.is_set()

    def duration_ms(self) -> int:
        return int(((self.ended_at or time.monotonic()) - self.started) * 1000)

    # -- output ---------------------------------------------------------------------

    def output_total(self) -> int:
        return self.out.total + (self.err.total if self.err else 0)

    def has_unread(self) -> bool:
        return self.delivered < self.out.total or (self.err is not None and self.delivered_err < self.err.total)

    def unread_bytes(self) -> int:
        return (self.out.total - self.delivered) + ((self.err.total - self.delivered_err) if self.err else 0)

    def caught_up(self, after: int | None = None) -> bool:
        """Is the cursor (or ``after``) at the end of stdout, or of the merged output?"""
        return (self.delivered if after is None else after) >= self.out.total

    def output_tail(self) -> str:
        """The last output kept, as text (for recognising an error message)."""
        return self.out.tail_text()

    async def wait_for(self, *, deadline: float, quiet_s: float | None, baseline: int) -> None:
        """Return at the deadline, when the command has finished, or — with ``quiet_s`` —
        once output arrived after ``baseline`` and then stayed quiet for ``quiet_s``."""
        while not self.finished.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            wait = deadline - now
            if quiet_s is not None and self.output_total() > baseline:
                quiet_left = self._last_output + quiet_s - now
                if quiet_left <= 0:
                    return
                wait = min(wait, quiet_left)
            event = self._activity
            with anyio.move_on_after(wait):
                await event.wait()

    def take(self, max_bytes: int, after: int | None = None) -> Taken:
        """Output from the session's cursor (or ``after``), advancing the cursor."""
        self.touch()
        text, start, end, dropped = _take(self.out, self.delivered if after is None else after, max_bytes)
        self.delivered = max(self.delivered, end)
        self.out.mark_consumed(self.delivered)
        taken = Taken(text=text, start=start, end=end, dropped=dropped)
        if self.err is not None:
            err_text, _, err_end, err_dropped = _take(self.err, self.delivered_err, max_bytes)
            self.delivered_err = err_end
            self.err.mark_consumed(err_end)
            taken.stderr_text, taken.stderr_end, taken.stderr_dropped = err_text, err_end, err_dropped
        return taken

    def status(self) -> dict[str, Any]:
        code = self.returncode
        info: dict[str, Any] = {"running": self.running, "exit_code": None, "signal": None, "timed_out": self.timed_out}
        if code is None:
            return info
        if self.timed_out:
            info["exit_code"] = TIMEOUT_EXIT_CODE
        elif code < 0:
            info["exit_code"] = 128 - code
        else:
            info["exit_code"] = code
        if code < 0:
            info["signal"] = signal.Signals(-code).name
        return info


"""One running (or finished) command: its output buffers, cursors, exit and yield logic."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from ..contract import ToolError
from ..procfs import ProcRow
from .buffer import OutputBuffer, Taken, take_text
from .kill import descendants, kill_session, kill_tree, members
from .tracking import populated, signal_group

DRAIN_AFTER_EXIT_S = 2.0  # grandchildren may keep the pipes open after the leader exits
MAX_PENDING_INPUT = 8 * 1024 * 1024
"""Input written to a session and not yet taken by its command: more is refused, not held."""
INPUT_CHUNK = 65536
TIMEOUT_EXIT_CODE = 124


class ProcessHandle(Protocol):
    pid: int

    async def write(self, data: bytes) -> None: ...
    def resize(self, rows: int, cols: int) -> None: ...
    def signal_group(self, signum: int) -> None: ...
    async def wait(self) -> int: ...
    def close(self) -> None: ...


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
    # Input: written by a task of its own as the command takes it, so that no call waits on a
    # command that does not read (found by testing: a 3 MB write_stdin to `sleep` never
    # returned, and held the server's shutdown).
    input_pending: bytearray = field(default_factory=bytearray)
    input_written: int = 0
    input_untaken: int = 0
    """Bytes the command never took: it closed its stdin, or ended, first."""
    input_state: str = "open"  # open | closing (end stdin once written) | closed
    _input_wake: anyio.Event = field(default_factory=anyio.Event)

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
                    if self.interactive or self.tty:
                        tg.start_soon(self._feed)
                    if self.timeout_s is not None:
                        tg.start_soon(self._watchdog, self.timeout_s)
                    self.returncode = await self.process.wait()
                    if populated(self.group):
                        # What the command left ends with it, as under the keeper and in the
                        # sandbox's PID namespace (found by testing: as root without a sandbox,
                        # leftovers ran on past the timeout, and held the output open for 2 s).
                        signal_group(self.group, signal.SIGKILL)
                    self.exited.set()
                    self._poke()
                    await self._drain()
                    tg.cancel_scope.cancel()
            finally:
                for buffer, _ in self.readers:
                    buffer.close()
                self._input_gone()
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

    def send(self, data: bytes, *, close: bool = False) -> None:
        """Queue ``data`` for the command's stdin or terminal; written as the command takes it.
        ``close``: end stdin once everything is written (a terminal has none of its own)."""
        if not self.running:
            raise ToolError(f"session {self.id} has exited; read_output returns what is left", code="exited")
        if not (self.interactive or self.tty):
            raise ToolError("this session has no stdin (start it with interactive=true or tty=true)", code="no_stdin")
        if self.input_state != "open":
            raise ToolError(f"the process closed its stdin after taking {self.input_written} bytes; nothing more can "
                            "be written to this session", code="stdin_closed")
        if len(self.input_pending) + len(data) > MAX_PENDING_INPUT:
            raise ToolError(
                f"{len(self.input_pending)} bytes written earlier are still waiting for the command to read them, "
                f"and at most {MAX_PENDING_INPUT} may wait: this write is refused. To proceed: read_output to see "
                "what the command is doing, wait for it to take its input, or terminate it.",
                code="input_backlog", details={"input_pending_bytes": len(self.input_pending)})
        self.input_pending += data
        if close:
            self.input_state = "closing"
        self._input_wake.set()

    async def _feed(self) -> None:
        """Write queued input in order, a chunk at a time, until stdin is closed or the command ends."""
        while True:
            while not self.input_pending and self.input_state == "open":
                self._input_wake = anyio.Event()
                await self._input_wake.wait()
            if not self.input_pending:  # closing, and all written
                self.input_state = "closed"
                if hasattr(self.process, "close_stdin"):  # a terminal has no stdin of its own to close
                    self.process.close_stdin()
                return
            chunk = bytes(self.input_pending[:INPUT_CHUNK])
            try:
                await self.process.write(chunk)
            except (ToolError, OSError):  # stdin closed by the command (EPIPE), or its terminal gone (EIO)
                self._input_gone()
                return
            del self.input_pending[: len(chunk)]
            self.input_written += len(chunk)

    def _input_gone(self) -> None:
        self.input_untaken += len(self.input_pending)
        self.input_pending.clear()
        self.input_state = "closed"

    def input_status(self) -> tuple[int, str | None]:
        """(bytes still waiting to be written, a note for the agent when its input was not all taken)."""
        if self.input_pending:
            return len(self.input_pending), (
                f"{len(self.input_pending)} bytes of input are waiting for the command to read them (it took "
                f"{self.input_written} so far); they are written as it reads")
        if self.input_untaken:
            return 0, (f"the command took {self.input_written} bytes of its input and left {self.input_untaken} "
                       "(it closed its stdin or ended first)")
        return 0, None

    def resize(self, rows: int, cols: int) -> None:
        if not self.tty:
            raise ToolError(f"session {self.id} is not a terminal; only tty=true sessions can be resized",
                            code="not_a_terminal")
        if not self.running:
            raise ToolError(f"session {self.id} has exited; its terminal is gone", code="exited")
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
        """How much output a read could show so far (what a wait for new output compares)."""
        return self.out.readable_end() + (self.err.readable_end() if self.err else 0)

    def has_unread(self) -> bool:
        return self.delivered < self.out.total or (self.err is not None and self.delivered_err < self.err.total)

    def unread_bytes(self) -> int:
        return (self.out.total - self.delivered) + ((self.err.total - self.delivered_err) if self.err else 0)

    def output_end(self, stderr: bool = False) -> int:
        """The offset after the last byte written so far of stdout (or of the merged output),
        or of the separate stderr."""
        return self.err.total if stderr and self.err is not None else self.out.total

    def caught_up(self, after: int | None = None, after_err: int | None = None) -> bool:
        """Is every cursor (or ``after``, ``after_err``) at the end of its stream?"""
        if (self.delivered if after is None else after) < self.out.readable_end():
            return False
        return self.err is None or (self.delivered_err if after_err is None else after_err) >= self.err.readable_end()

    def output_tail(self) -> str:
        """The last output kept, as text (for recognising an error message)."""
        return self.out.tail_text()

    async def wait_for(self, *, deadline: float, quiet_s: float | None, baseline: int) -> None:
        """Return at the deadline, when the command has finished, or — with ``quiet_s`` —
        once output arrived after ``baseline`` and then stayed quiet for ``quiet_s``.

        Once the command has exited, quiet no longer ends the wait: an answer that reports the
        exit must hold what the command wrote before it, and the drain that reads the rest is
        short (found in CI: on a loaded machine `top` on a terminal answered with exit code 0
        and the first line of its output). A lossless buffer that is full is the exception:
        its drain waits for the very client that waits for this answer."""
        while not self.finished.is_set():
            now = time.monotonic()
            if now >= deadline:
                return
            wait = deadline - now
            draining = self.exited.is_set() and all(buffer.has_room() for buffer, _ in self.readers)
            if quiet_s is not None and not draining and self.output_total() > baseline:
                quiet_left = self._last_output + quiet_s - now
                if quiet_left <= 0:
                    return
                wait = min(wait, quiet_left)
            event = self._activity
            with anyio.move_on_after(wait):
                await event.wait()

    def take(self, max_bytes: int, after: int | None = None, after_err: int | None = None) -> Taken:
        """Output from the session's cursors (or from ``after`` on stdout and ``after_err`` on a
        separate stderr), moving each cursor on, never back."""
        self.touch()
        text, start, end, dropped = take_text(self.out, self.delivered if after is None else after, max_bytes)
        self.delivered = max(self.delivered, end)
        self.out.mark_consumed(self.delivered)
        taken = Taken(text=text, start=start, end=end, dropped=dropped)
        if self.err is not None:
            err_text, err_start, err_end, err_dropped = take_text(
                self.err, self.delivered_err if after_err is None else after_err, max_bytes)
            self.delivered_err = max(self.delivered_err, err_end)
            self.err.mark_consumed(self.delivered_err)
            taken.stderr_text, taken.stderr_start, taken.stderr_end, taken.stderr_dropped = (
                err_text, err_start, err_end, err_dropped)
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


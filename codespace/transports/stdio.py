"""MCP over stdin/stdout without a thread hop per line.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``, which
costs about a dozen worker-thread round trips per tool call; here the event loop
waits on the descriptors directly (non-blocking reads and writes), which more
than halves the per-call latency (benchmarks/README.md).

Like the SDK transport, it claims fds 0 and 1 while serving: fd 0 then reads
/dev/null and fd 1 points at stderr, so a stray ``print`` or a child process can
never write into the protocol channel. Both are restored on exit.

Each line goes to the front (:mod:`.front`), which answers it or hands it back
for the SDK (:mod:`.bridge`); lines then wait behind it, so the SDK sees them in
arrival order. At end of input the connection stays open until every request
already received has been answered (up to ``SETTLE_LIMIT_S``): a client that
closes its side after the last request, as a shell pipeline does, still gets
every answer. Once nobody reads stdout either (the client died), it does not wait.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..fdio import read_some, write_all
from .stdio_fds import READ_CHUNK, Claim, Lines
from .stdio_opening import Opening

if TYPE_CHECKING:
    from .front import Front

log = logging.getLogger(__name__)

SETTLE_LIMIT_S = 60.0  # at end of input, how long answers still being worked on are awaited


async def _read_chunk(fd: int, pollable: bool) -> bytes:
    if not pollable:
        return await anyio.to_thread.run_sync(os.read, fd, READ_CHUNK)
    return await read_some(fd, READ_CHUNK)


class StdioConnection:
    """The wire side: lines in (to the front, then to the SDK bridge), lines out."""

    def __init__(self, claim: Claim, front: Front, tg: Any, rest: Opening | None = None) -> None:
        self.claim = claim
        self.front = front
        self.tg = tg
        self._rest = rest or Opening()  # where the opening stopped (.stdio_opening)
        # fast_acquire: an uncontended write must not yield to the loop (one iteration per answer saved)
        self._write_lock = anyio.Lock(fast_acquire=True)
        # Lines the front passed on wait here for the SDK in arrival order, and so does
        # every line after them; ``None`` marks the end of input.
        self._backlog: deque[tuple[bytes, dict[str, Any] | None] | None] = deque()
        self._backlog_ready = anyio.Event()
        self.finished = anyio.Event()

    async def write_line(self, data: bytes) -> None:
        async with self._write_lock:
            try:
                await write_all(self.claim.write_fd, data + b"\n")
            except BrokenPipeError:
                raise anyio.ClosedResourceError from None

    def schedule(self, data: bytes) -> None:
        self.tg.start_soon(self._write_quietly, data)

    async def _write_quietly(self, data: bytes) -> None:
        try:
            await self.write_line(data)
        except anyio.ClosedResourceError:
            log.info("the client closed its side; an answer was not delivered")

    def _take(self, line: bytes) -> dict[str, Any] | None:
        try:
            return self.front.take(line, self.schedule)
        except Exception:  # noqa: BLE001 - one bad line must not end the server
            log.exception("a line could not be served: %.200r", line)
            self.schedule(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error"}}')
            return None

    def accept(self, lines: list[bytes]) -> None:
        for line in lines:
            if not line.strip():
                continue
            if self._backlog:
                self._backlog.append((line, None))
                continue
            message = self._take(line)
            if message is not None:
                self._backlog.append((line, message))
        if self._backlog and not self._backlog_ready.is_set():
            self._backlog_ready.set()

    def end_of_input(self) -> None:
        self._backlog.append(None)
        self._backlog_ready.set()

    def take_rest(self) -> tuple[Lines, bool]:
        """The input the opening read and did not serve: its lines are accepted now; the
        reader holding the line in progress, and True if input had already ended (then that
        line is accepted too)."""
        opening = self._rest
        self.accept(opening.rest)
        if opening.ended:
            self.accept(opening.reader.feed(b""))
            self.end_of_input()
        return opening.reader, opening.ended

    async def _forward(self, line: bytes, message: dict[str, Any]) -> None:
        try:
            await self.front.bridge.forward(message, line)
        except Exception as exc:  # noqa: BLE001 - the SDK refused the line: answer it, go on
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            request_id = message.get("id")
            self.schedule(_parse_error(request_id, exc))

    async def settle(self) -> None:
        """At end of input: wait until every request received is answered (a client that
        closed its side after its last request still reads the answers)."""
        direct = self.front.direct
        with anyio.move_on_after(SETTLE_LIMIT_S):
            while self.front.bridge.unanswered or (direct is not None and direct.in_flight):
                if _nobody_reads(self.claim.write_fd):
                    # Found by testing: a killed client held the server (and an exec call's command)
                    # for the whole minute, though no answer could reach anyone.
                    log.info("end of input, and nobody reads the answers any more: not waiting for them")
                    return
                await anyio.sleep(0.002)

    async def drain(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """Feed held lines to the SDK (awaiting it: that is the back-pressure), pausing input
        meanwhile."""
        while True:
            await self._backlog_ready.wait()
            pause()
            while self._backlog:
                held = self._backlog.popleft()
                if held is None:
                    await self.settle()
                    self.finished.set()
                    return
                line, message = held
                if message is None:
                    message = self._take(line)
                if message is not None:
                    await self._forward(line, message)
            self._backlog_ready = anyio.Event()
            resume()

    async def read_on_loop(self) -> None:
        """asyncio: a reader callback stays registered with the loop and takes each line as
        it arrives (no task wake-up and no epoll re-registration per message)."""
        loop = asyncio.get_running_loop()
        fd = self.claim.read_fd
        reader, done = self.take_rest()

        def on_readable() -> None:
            nonlocal done
            try:
                chunk = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            self.accept(reader.feed(chunk))
            if not chunk:
                loop.remove_reader(fd)
                done = True
                self.end_of_input()

        def pause() -> None:
            loop.remove_reader(fd)

        def resume() -> None:
            if not done:
                loop.add_reader(fd, on_readable)

        resume()
        try:
            await self.drain(pause, resume)
        finally:
            loop.remove_reader(fd)

    async def read_in_task(self) -> None:
        """Other event loops, and stdin that cannot be polled (a regular file)."""
        reader, ended = self.take_rest()

        async def feed() -> None:
            while not ended:
                chunk = await _read_chunk(self.claim.read_fd, self.claim.read_pollable)
                self.accept(reader.feed(chunk))
                if not chunk:
                    self.end_of_input()
                    return
                while self._backlog:  # back-pressure: read on once the SDK has taken the held lines
                    await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            await self.drain(lambda: None, lambda: None)

    async def run(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio)
            on_asyncio = False
        else:
            on_asyncio = True
        if self.claim.read_pollable and on_asyncio:
            await self.read_on_loop()
        else:
            await self.read_in_task()


def _nobody_reads(fd: int) -> bool:
    """The other end of ``fd`` is closed: a pipe's reader (POLLERR) or a socket's peer (POLLHUP)."""
    poller = select.poll()
    poller.register(fd, 0)  # errors and hang-ups are reported whatever is asked
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _parse_error(request_id: Any, exc: Exception) -> bytes:
    from .wire import INVALID_REQUEST, error_reply, valid_id

    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return error_reply(request_id if valid_id(request_id) else None, INVALID_REQUEST,
                       f"Invalid Request: not a valid MCP message ({detail})")


@asynccontextmanager
async def stdio_transport(front: Front, claim: Claim | None = None,
                          rest: Opening | None = None) -> AsyncIterator[StdioConnection]:
    """Serve fds 0/1 through ``front`` until the context ends; ``finished`` is set once
    input has ended and every request received has been answered. ``claim`` and ``rest``:
    the descriptors an opening (:mod:`.stdio_opening`) claimed and served, and where it
    stopped."""
    claim = claim or Claim()
    try:
        async with anyio.create_task_group() as tg:
            connection = StdioConnection(claim, front, tg, rest)
            front.bridge.send = connection._write_quietly
            front.bridge.tg = tg
            if front.direct is not None:
                front.direct.attach(tg, connection._write_quietly)
            tg.start_soon(connection.run)
            try:
                yield connection
            finally:
                tg.cancel_scope.cancel()
                if front.direct is not None:
                    await front.direct.close()
    finally:
        claim.release()

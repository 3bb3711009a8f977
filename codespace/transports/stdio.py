"""MCP over stdin/stdout without a thread hop per line.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``, which
costs about a dozen worker-thread round trips per tool call; here the event loop
waits on the descriptors directly (non-blocking reads and writes), which more
than halves the per-call latency (benchmarks/README.md).

Like the SDK transport, it claims fds 0 and 1 while serving: fd 0 then reads
/dev/null and fd 1 points at stderr, so a stray ``print`` or a child process can
never write into the protocol channel. Both are restored on exit.

At end of input the streams stay open until every request already received has
been answered (up to ``SETTLE_LIMIT_S``): a client that closes its side after
the last request, as a shell pipeline does, still gets every answer.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from ..fdio import read_some, write_all
from .direct import DirectToolCalls

READ_CHUNK = 1 << 16
SETTLE_LIMIT_S = 60.0  # at end of input, how long answers still being worked on are awaited


def _pollable(fd: int) -> bool:
    # epoll refuses regular files and directories; those are read on a thread instead.
    mode = os.fstat(fd).st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


class _Claim:
    """Private duplicates of fds 0/1 for the protocol; the originals diverted."""

    def __init__(self) -> None:
        self.read_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        self.write_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        self._saved = (fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3))
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        self.read_pollable = _pollable(self.read_fd)
        self.write_pollable = _pollable(self.write_fd)
        self._flags = {}
        for fd, pollable in ((self.read_fd, self.read_pollable), (self.write_fd, self.write_pollable)):
            if pollable:
                self._flags[fd] = os.get_blocking(fd)
                os.set_blocking(fd, False)

    def release(self) -> None:
        for fd, blocking in self._flags.items():
            try:
                os.set_blocking(fd, blocking)  # the description may be shared with a terminal
            except OSError:
                pass
        os.dup2(self._saved[0], 0)
        os.dup2(self._saved[1], 1)
        for fd in (*self._saved, self.read_fd, self.write_fd):
            os.close(fd)


async def _read_chunk(fd: int, pollable: bool) -> bytes:
    if not pollable:
        return await anyio.to_thread.run_sync(os.read, fd, READ_CHUNK)
    return await read_some(fd, READ_CHUNK)


def _lines(pending: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines once ``chunk`` is added to ``pending``, and what remains; at end
    of input (``chunk`` empty) a last line without its newline still counts."""
    if not chunk:
        return [pending], b""
    pending += chunk
    if b"\n" not in chunk:
        return [], pending
    *lines, rest = pending.split(b"\n")
    return lines, rest


def _parse_error(line: bytes, exc: Exception) -> bytes:
    """JSON-RPC 2.0 wants an answer even to a line we cannot use (the SDK stays silent,
    leaving a client waiting forever)."""
    request_id = None
    try:
        parsed = json.loads(line)
    except ValueError:
        code, message = -32700, "Parse error: the line is not valid JSON"
    else:
        if isinstance(parsed, dict) and isinstance(parsed.get("id"), (str, int)):
            request_id = parsed["id"]
        code, message = -32600, f"Invalid Request: not a JSON-RPC 2.0 message ({str(exc).splitlines()[0][:200]})"
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}).encode()


@asynccontextmanager
async def stdio_transport(direct: DirectToolCalls | None = None) -> AsyncIterator[tuple[object, object]]:
    """The SDK's read/write streams over fds 0/1; with ``direct``, plain tool calls are
    answered without going through the SDK's per-request machinery."""
    claim = _Claim()
    inbound_send, inbound = create_context_streams[SessionMessage | Exception](0)
    outbound, outbound_receive = create_context_streams[SessionMessage](0)

    # fast_acquire: an uncontended write must not yield to the loop (one iteration per answer saved)
    write_lock = anyio.Lock(fast_acquire=True)

    async def write_line(data: bytes) -> None:
        async with write_lock:
            try:
                await write_all(claim.write_fd, data + b"\n")
            except BrokenPipeError:
                raise anyio.ClosedResourceError from None

    # Lines go to the direct path or the SDK strictly in arrival order; one the direct
    # path cannot take right away waits here, and so does every line after it.
    backlog: deque[tuple[bytes, bool] | None] = deque()  # (line, for the SDK only); None: end of input
    backlog_ready = anyio.Event()

    # Ids of requests handed to the SDK and not yet answered: at end of input the streams
    # stay open until these are answered too (the SDK would cancel them on closing).
    unanswered: set[object] = set()

    async def settle() -> None:
        """At end of input: wait until every request received is answered (a client that
        closed its side after its last request still reads the answers)."""
        with anyio.move_on_after(SETTLE_LIMIT_S):
            while unanswered or (direct is not None and direct.in_flight):
                await anyio.sleep(0.005)

    def take(line: bytes) -> bool:
        if direct is None or not direct.may_want(line):
            return False
        try:
            return direct.intercept(json.loads(line), tg, write_line)
        except ValueError:
            return False  # not JSON: the SDK path answers with the parse error

    def accept(lines: list[bytes]) -> None:
        for line in lines:
            if not line.strip():
                continue
            if backlog:
                backlog.append((line, False))
            elif not take(line):
                backlog.append((line, True))  # the direct path has seen it: not offered twice
        if backlog and not backlog_ready.is_set():
            backlog_ready.set()

    async def to_sdk(line: bytes) -> None:
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as exc:  # noqa: BLE001 - any bad line gets an answer, then we go on
            await write_line(_parse_error(line, exc))
            return
        if isinstance(message, types.JSONRPCRequest):
            unanswered.add(message.id)
        await inbound_send.send(SessionMessage(message))

    async def drain_backlog(pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """Feed held lines to the SDK (awaiting it: that is the back-pressure), pausing input
        meanwhile."""
        nonlocal backlog_ready
        async with inbound_send:
            while True:
                await backlog_ready.wait()
                pause()
                while backlog:
                    held = backlog.popleft()
                    if held is None:
                        await settle()
                        return
                    line, sdk_only = held
                    if sdk_only or not take(line):
                        await to_sdk(line)
                backlog_ready = anyio.Event()
                resume()

    async def read_on_loop() -> None:
        """asyncio: a reader callback stays registered with the loop and takes each line as
        it arrives (no task wake-up and no epoll re-registration per message)."""
        loop = asyncio.get_running_loop()
        pending = b""
        done = False

        def on_readable() -> None:
            nonlocal pending, done
            try:
                chunk = os.read(claim.read_fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            lines, pending = _lines(pending, chunk)
            accept(lines)
            if not chunk:
                loop.remove_reader(claim.read_fd)
                done = True
                backlog.append(None)
                backlog_ready.set()

        def pause() -> None:
            loop.remove_reader(claim.read_fd)

        def resume() -> None:
            if not done:
                loop.add_reader(claim.read_fd, on_readable)

        resume()
        try:
            await drain_backlog(pause, resume)
        finally:
            loop.remove_reader(claim.read_fd)

    async def read_in_task() -> None:
        """Other event loops, and stdin that cannot be polled (a regular file)."""
        pending = b""
        async with inbound_send:
            while True:
                chunk = await _read_chunk(claim.read_fd, claim.read_pollable)
                lines, pending = _lines(pending, chunk)
                for line in lines:
                    if line.strip() and not take(line):
                        await to_sdk(line)
                if not chunk:
                    await settle()
                    return

    async def reader() -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio)
            on_asyncio = False
        else:
            on_asyncio = True
        if claim.read_pollable and on_asyncio:
            await read_on_loop()
        else:
            await read_in_task()

    async def writer() -> None:
        async with outbound_receive:
            async for session_message in outbound_receive:
                message = session_message.message
                data = message.model_dump_json(by_alias=True, exclude_unset=True)
                if direct is not None:
                    direct.observe_outgoing(data)
                await write_line(data.encode())
                if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                    unanswered.discard(message.id)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield inbound, outbound
            finally:
                tg.cancel_scope.cancel()
    finally:
        claim.release()

"""The plumbing the HTTP and SOCKS5 sides share: a client connection read with lookahead,
the connection to a checked address, and the relay of bytes both ways."""

from __future__ import annotations

import anyio
from anyio.abc import ByteStream

from . import sockets
from .sockets import RawStream

MAX_HEAD = 64 * 1024
CHUNK = 65536
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
"""A client's time to send a request head (HTTP) or its negotiation (SOCKS5): a connection that
sends nothing holds two of the server's descriptors, the proxy's and its own."""


class ProtocolError(Exception):
    pass


class Reader:
    """Reads from a byte stream with lookahead; what is left over is forwarded first."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.deadline: float | None = None
        """While set (``anyio.current_time()``'s clock), reads past it fail: see :meth:`expect_request`."""

    def expect_request(self) -> None:
        """A request (head or negotiation) is due within REQUEST_TIMEOUT_S; :meth:`relaying` ends that."""
        self.deadline = anyio.current_time() + REQUEST_TIMEOUT_S

    def relaying(self) -> None:
        self.deadline = None

    async def fill(self) -> bool:
        try:
            if self.deadline is None:
                chunk = await self.stream.receive(CHUNK)
            else:
                with anyio.fail_after(max(0.0, self.deadline - anyio.current_time())):
                    chunk = await self.stream.receive(CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        except TimeoutError:
            raise ProtocolError(f"no complete request within {REQUEST_TIMEOUT_S:g} s") from None
        self.buffer += chunk
        return True

    async def until(self, marker: bytes, limit: int = MAX_HEAD) -> bytes | None:
        while True:
            index = self.buffer.find(marker)
            if index >= 0:
                data = bytes(self.buffer[: index + len(marker)])
                del self.buffer[: index + len(marker)]
                return data
            if len(self.buffer) > limit:
                raise ProtocolError("request head too large")
            if not await self.fill():
                return None

    async def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not await self.fill():
                raise ProtocolError("connection closed early")
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    async def copy_exactly(self, n: int, sink: ByteStream) -> None:
        """Forward the next ``n`` bytes to ``sink`` as they arrive (never all held at once)."""
        while n > 0:
            if not self.buffer and not await self.fill():
                raise ProtocolError("connection closed early")
            piece = bytes(self.buffer[:n])
            del self.buffer[: len(piece)]
            await sink.send(piece)
            n -= len(piece)

    def take_buffered(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


async def connect_checked(addresses: list[str], port: int) -> RawStream | None:
    """The first of the checked ``addresses`` that accepts, or None."""
    for address in addresses:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT_S):
                return await sockets.connect(address, port)
        except (OSError, TimeoutError):
            continue
    return None


async def half_close(stream: ByteStream) -> None:
    try:
        await stream.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, NotImplementedError):
        pass


async def pump(source: ByteStream, sink: ByteStream, *, eof: bool = True) -> None:
    try:
        while True:
            await sink.send(await source.receive(CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    if eof:
        await half_close(sink)


async def tunnel(reader: Reader, upstream: ByteStream) -> None:
    reader.relaying()
    leftover = reader.take_buffered()
    if leftover:
        await upstream.send(leftover)
    if isinstance(reader.stream, RawStream) and isinstance(upstream, RawStream):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sockets.pump, reader.stream, upstream)
            tg.start_soon(sockets.pump, upstream, reader.stream)
        return
    done = 0

    async def one_way(source: ByteStream, sink: ByteStream) -> None:
        nonlocal done
        await pump(source, sink)
        done += 1
        if done == 2:
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one_way, reader.stream, upstream)
        tg.start_soon(one_way, upstream, reader.stream)

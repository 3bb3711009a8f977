"""Plain non-blocking sockets on the event loop: the proxy's hot path.

anyio's socket streams sit on asyncio transports that pause and resume reading around every
``receive`` (two ``epoll_ctl`` calls per chunk) and connect through its happy-eyeballs
machinery. Measured (benchmarks/README-proxy.md), that held a CONNECT tunnel to a fifth of a
direct loopback connection and added over a millisecond per connection. Here a socket is
read and written directly, waiting for readiness only when it would block. An established
tunnel copies through a buffer that grows with the stream (64 KiB, up to 1 MiB while reads
keep filling it): measured against ``splice(2)`` through a 1 MiB pipe, the copy carries
0.54-0.73x a direct connection's throughput where splice carried 0.41-0.53x, because the
reading end receives spliced pages as many small fragments and spends twice the CPU on them.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger(__name__)

CHUNK = 1 << 18
TUNNEL_FIRST_BUFFER = 1 << 16  # most tunnels carry little: keep idle ones small
TUNNEL_MAX_BUFFER = 1 << 20
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class RawStream:
    """A connected non-blocking socket with the ``anyio.abc.ByteStream`` methods the proxy uses."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock

    async def receive(self, max_bytes: int = CHUNK) -> bytes:
        while True:
            try:
                data = self.sock.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except OSError as exc:
                if self.sock.fileno() < 0:
                    raise anyio.ClosedResourceError from None
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
            except OSError as exc:
                if self.sock.fileno() < 0:
                    raise anyio.ClosedResourceError from None
                raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self.sock.close()

    async def __aenter__(self) -> RawStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.sock.close()


async def serve(listener: socket.socket, handler: Callable[[socket.socket], Awaitable[None]],
                limits: dict[str, anyio.CapacityLimiter] | None = None) -> None:
    """Accept on ``listener`` (closed when this ends) and run ``handler`` for each connection.
    ``limits`` (what each limits, e.g. "this route") -> limiter: each connection holds a token of
    every one while it lasts, and none is accepted while one is exhausted (clients wait in the
    listen backlog; said once per limit in the log)."""
    listener.setblocking(False)
    limits = limits or {}
    warned: set[str] = set()

    async def run(conn: socket.socket, token: object) -> None:
        try:
            await handler(conn)
        finally:
            for limiter in limits.values():
                limiter.release_on_behalf_of(token)

    try:
        async with anyio.create_task_group() as tg:
            while True:
                token = object()
                taken = []
                try:
                    for what, limiter in limits.items():
                        if limiter.available_tokens == 0 and what not in warned:
                            warned.add(what)
                            log.warning("proxy: %d connections open, the most %s may have; new ones wait",
                                        limiter.total_tokens, what)
                        await limiter.acquire_on_behalf_of(token)
                        taken.append(limiter)
                    conn = await _accept(listener)
                except BaseException:
                    for limiter in taken:
                        limiter.release_on_behalf_of(token)
                    raise
                tg.start_soon(run, conn, token)
    finally:
        listener.close()


async def _accept(listener: socket.socket) -> socket.socket:
    while True:
        try:
            conn, _ = listener.accept()
            return conn
        except BlockingIOError:
            await anyio.wait_readable(listener)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                log.warning("proxy: cannot accept (%s); retrying", exc.strerror)
                await anyio.sleep(0.1)
            elif exc.errno not in (errno.ECONNABORTED, errno.EPROTO):
                raise


async def connect(address: str, port: int) -> RawStream:
    """A TCP connection to an address the rules checked (no name resolution here)."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        err = sock.connect_ex((address, port))
        if err == errno.EINPROGRESS:
            await anyio.wait_writable(sock)
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
    except BaseException:
        sock.close()
        raise
    return RawStream(sock)


async def _copy_one_way(source: socket.socket, sink: RawStream) -> None:
    buffer = bytearray(TUNNEL_FIRST_BUFFER)
    view = memoryview(buffer)
    while True:
        try:
            n = source.recv_into(buffer)
        except BlockingIOError:
            await anyio.wait_readable(source)
            continue
        if not n:
            return
        await sink.send(view[:n])
        if n == len(buffer) and n < TUNNEL_MAX_BUFFER:  # a bulk transfer: bigger reads, fewer wake-ups
            buffer = bytearray(min(n * 4, TUNNEL_MAX_BUFFER))
            view = memoryview(buffer)


async def pump(source: RawStream, sink: RawStream) -> None:
    """Move bytes from ``source`` to ``sink`` until the source ends, then half-close the sink."""
    try:
        await _copy_one_way(source.sock, sink)
    except (*_GONE, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.ENOTCONN, errno.EPIPE):
            raise
    try:
        sink.sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass

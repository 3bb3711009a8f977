"""Plain non-blocking sockets on the event loop: the proxy's hot path.

anyio's socket streams sit on asyncio transports that pause and resume reading around every
``receive`` (two ``epoll_ctl`` calls per chunk) and connect through its happy-eyeballs
machinery. Measured (benchmarks/README-proxy.md), that held a CONNECT tunnel to a fifth of a
direct loopback connection and added over a millisecond per connection. Here a socket is
read and written directly, waiting for readiness only when it would block, and an
established tunnel moves its bytes with ``splice(2)`` through a pipe (no copy through
Python) when the kernel allows.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger(__name__)

CHUNK = 1 << 18
F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
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


async def serve(listener: socket.socket, handler: Callable[[socket.socket], Awaitable[None]]) -> None:
    """Accept on ``listener`` (closed when this ends) and run ``handler`` for each connection."""
    listener.setblocking(False)
    try:
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    await anyio.wait_readable(listener)
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        log.warning("proxy: cannot accept (%s); retrying", exc.strerror)
                        await anyio.sleep(0.1)
                        continue
                    if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                        continue
                    raise
                tg.start_soon(handler, conn)
    finally:
        listener.close()


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


class _Pipe:
    def __init__(self) -> None:
        self.read, self.write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(self.write, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # the default size works, with more system calls

    def close(self) -> None:
        os.close(self.read)
        os.close(self.write)


async def _splice_one_way(source: socket.socket, sink: socket.socket, pipe: _Pipe) -> None:
    held = 0  # bytes in the pipe, not yet in the sink
    while True:
        if not held:
            try:
                held = os.splice(source.fileno(), pipe.write, PIPE_SIZE, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                await anyio.wait_readable(source)
                continue
            if not held:
                return  # end of stream
        try:
            held -= os.splice(pipe.read, sink.fileno(), held, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            await anyio.wait_writable(sink)


async def _copy_one_way(source: socket.socket, sink: RawStream) -> None:
    buffer = bytearray(CHUNK)
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


async def pump(source: RawStream, sink: RawStream) -> None:
    """Move bytes from ``source`` to ``sink`` until the source ends, then half-close the sink;
    ``splice(2)`` when a pipe can be had, else through a buffer."""
    try:
        try:
            pipe = _Pipe() if hasattr(os, "splice") else None
        except OSError:
            pipe = None  # out of descriptors: copy instead
        try:
            if pipe is not None:
                await _splice_one_way(source.sock, sink.sock, pipe)
            else:
                await _copy_one_way(source.sock, sink)
        finally:
            if pipe is not None:
                pipe.close()
    except (*_GONE, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    except OSError as exc:
        if exc.errno not in (errno.EBADF, errno.ENOTCONN, errno.EPIPE):
            raise
    try:
        sink.sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass

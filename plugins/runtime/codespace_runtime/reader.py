"""A reader that keeps its socket registered with the loop and reads ahead.

:func:`framing.recv_frame` waits for readiness once per frame (register, a future, unregister)
and reads a header and a body separately: about half of a small round trip's cost. The service
and the client read through this instead: one registration for the connection's life, large
reads, frames parsed out of a buffer.

Descriptors: Linux ends a stream read right after the message that carried ``SCM_RIGHTS``, and
our sender attaches them to the message that starts a frame. So the descriptors of one read
belong to the last frame that starts within it; a peer that attaches them elsewhere gets its
frame refused for a wrong count, as with the one-frame reader. Nothing is read ahead without
bound: past ``MAX_AHEAD`` frames or a full frame's bytes, reading pauses until the owner catches up.

The owner must :meth:`close` the reader before it closes the socket (the loop would otherwise
keep watching a descriptor number that may be reused).
"""

from __future__ import annotations

import asyncio
import collections
import socket

from .framing import _ANCILLARY, MAX_FDS, MAX_FRAME, FrameError, _check_fd_count, close_all, _descriptors, decode_body

CHUNK = 256 * 1024
MAX_AHEAD = 64


class FrameReader:
    def __init__(self, sock: socket.socket, *, max_frame: int = MAX_FRAME, max_ahead: int = MAX_AHEAD) -> None:
        """``max_frame``, ``max_ahead``: tighter bounds, e.g. for a peer that has not proved who it
        is yet (:meth:`limit` widens them later)."""
        self.max_frame, self.max_ahead = max_frame, max_ahead
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._buf = bytearray()
        self._chunk = bytearray(CHUNK)
        self._chunk_view = memoryview(self._chunk)
        self._base = 0          # stream offset of _buf[0]
        self._next = 0          # stream offset of the next frame not parsed yet
        self._fds: dict[int, list[int]] = {}   # frame start -> descriptors that came with it
        self._ready: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._reading = False
        self._done = False      # EOF or a fatal error queued: read no more
        self._resume()

    async def next(self) -> tuple[dict, list[int]]:
        """The next frame, like :func:`framing.recv_frame` (``EOFError``, ``FrameError``)."""
        while not self._ready:
            if self._done and not self._reading:
                raise EOFError("the reader is closed")
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._ready.popleft()
        if not self._reading and not self._done and len(self._ready) < self.max_ahead // 2 + 1:
            self._resume()
        if isinstance(item, BaseException):
            if isinstance(item, EOFError) or getattr(item, "fatal", False):
                self._ready.appendleft(item)  # every later call sees the end too
            raise item
        return item

    def limit(self, *, max_frame: int = MAX_FRAME, max_ahead: int = MAX_AHEAD) -> None:
        self.max_frame, self.max_ahead = max_frame, max_ahead
        if not self._reading and not self._done and len(self._ready) < max_ahead // 2:
            self._resume()

    def close(self) -> None:
        self._pause()
        self._done = True
        for fds in self._fds.values():
            close_all(fds)
        self._fds.clear()
        for item in self._ready:
            if isinstance(item, tuple):
                close_all(item[1])
        self._ready.clear()

    def _resume(self) -> None:
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _finish(self, item: BaseException) -> None:
        self._ready.append(item)
        self._done = True
        self._pause()

    def _on_readable(self) -> None:
        try:
            # Into a buffer kept for the connection's life: recvmsg(CHUNK) would allocate (and
            # fault in) CHUNK bytes per read, several times the cost of a small frame's read.
            n, ancdata, flags, _ = self._sock.recvmsg_into([self._chunk], _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._finish(exc)
        else:
            self._take(self._chunk_view[:n], _descriptors(ancdata), flags)
        if self._waiter is not None and not self._waiter.done() and self._ready:
            self._waiter.set_result(None)

    def _take(self, data: bytes | memoryview, fds: list[int], flags: int) -> None:
        if flags & socket.MSG_CTRUNC:
            close_all(fds)
            self._finish(FrameError(f"frame refused: more than {MAX_FDS} descriptors attached", fatal=True))
            return
        if not data:
            pending = self._base + len(self._buf) - self._next
            self._finish(EOFError("the peer closed the connection") if not pending else
                         FrameError(f"truncated frame: the connection closed {pending} bytes into a frame", fatal=True))
            return
        chunk_start = self._base + len(self._buf)
        self._buf += data
        if fds:
            self._fds.setdefault(self._last_start(chunk_start + len(data)), []).extend(fds)
        self._parse()
        if len(self._ready) >= self.max_ahead or len(self._buf) > self.max_frame + 4:
            self._pause()

    def _last_start(self, chunk_end: int) -> int:
        start = last = self._next
        while start < chunk_end:
            last = start
            offset = start - self._base
            if offset + 4 > len(self._buf):
                break
            start += 4 + int.from_bytes(self._buf[offset:offset + 4], "big")
        return last

    def _parse(self) -> None:
        buf = self._buf
        while not self._done:
            offset = self._next - self._base
            if len(buf) - offset < 4:
                break
            length = int.from_bytes(buf[offset:offset + 4], "big")
            if length > self.max_frame:
                self._finish(FrameError(f"frame refused: its length {length} is over the limit of {self.max_frame} "
                                        "bytes", fatal=True))
                break
            if len(buf) - offset - 4 < length:
                break
            start, self._next = self._next, self._next + 4 + length
            fds = self._fds.pop(start, [])
            try:
                obj = decode_body(buf[offset + 4:offset + 4 + length])
                _check_fd_count(obj, len(fds))
            except FrameError as exc:
                close_all(fds)
                self._ready.append(exc)
                continue
            self._ready.append((obj, fds))
        consumed = self._next - self._base
        if consumed and (consumed == len(buf) or consumed > CHUNK):
            del buf[:consumed]
            self._base = self._next

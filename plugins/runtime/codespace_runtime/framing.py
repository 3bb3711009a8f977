"""Protocol 5's framing: a 4-byte big-endian length, then one UTF-8 JSON object.

Descriptors travel by ``SCM_RIGHTS`` on the first byte of a frame (its length header), and the
object says how many it carries (``"fds": N``): the receiver compares the count with what arrived
and closes every descriptor of a frame it refuses, so a peer cannot make us leak or mix them up.

The functions are coroutines over a non-blocking socket on the running loop. One frame at a time
per direction: a caller with several writers holds a lock around :func:`send_frame` (the client
and the service do), since two interleaved sends would corrupt the stream.
"""

from __future__ import annotations

import array
import asyncio
import json
import os
import re
import socket
from collections.abc import Sequence

MAX_FRAME = 16 * 1024 * 1024
MAX_FDS = 32
"""Descriptors one frame may carry; more arrive truncated (``MSG_CTRUNC``) and the frame is refused."""

_HEADER = 4
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
# A JSON escape of a UTF-16 surrogate: only then can a decoded string hold a lone surrogate,
# so only then is the (slower) walk over the object needed.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class FrameError(Exception):
    """A frame that cannot be accepted. ``fatal`` is true when the stream is out of step (an
    oversized or truncated frame): the connection must be closed. Otherwise the frame was read
    whole and the connection can go on after an error answer."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.fatal = fatal


def encode_frame(obj: dict, fd_count: int = 0) -> bytes:
    """The bytes of one frame holding ``obj`` (with ``"fds"`` set when descriptors go with it)."""
    if not isinstance(obj, dict):
        raise FrameError(f"a frame holds one JSON object, not {type(obj).__name__}")
    if fd_count or "fds" in obj:
        obj = {**obj, "fds": fd_count}
    try:
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FrameError(f"frame not sent: it holds a string that is not valid Unicode ({exc.reason})") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise FrameError(f"frame not sent: not JSON-serialisable ({exc})") from None
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame not sent: {len(body)} bytes is over the limit of {MAX_FRAME} bytes")
    return len(body).to_bytes(_HEADER, "big") + body


async def send_frame(sock: socket.socket, obj: dict, fds: Sequence[int] = ()) -> None:
    """Send ``obj`` as one frame, with ``fds`` (left open: the caller still owns them)."""
    data = encode_frame(obj, len(fds))
    loop = asyncio.get_running_loop()
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        while True:
            try:
                sent = sock.sendmsg([data], ancillary)
                break
            except BlockingIOError:
                await _wait(loop, sock, write=True)
        data = data[sent:]
    if data:
        await loop.sock_sendall(sock, data)


async def recv_frame(sock: socket.socket) -> tuple[dict, list[int]]:
    """The next frame's object and the descriptors that came with it (now the caller's).
    Raises :class:`EOFError` when the peer closed between frames, :class:`FrameError` otherwise."""
    loop = asyncio.get_running_loop()
    header, fds = await _recv_header(loop, sock)
    try:
        length = int.from_bytes(header, "big")
        if length > MAX_FRAME:
            # Refused before a byte of the body is read: the peer may not make us hold 4 GiB.
            raise FrameError(f"frame refused: its length {length} is over the limit of {MAX_FRAME} bytes",
                             fatal=True)
        body = await _recv_exactly(loop, sock, length)
        obj = decode_body(body)
        _check_fd_count(obj, len(fds))
    except BaseException:
        close_all(fds)
        raise
    return obj, fds


def decode_body(body: bytes | bytearray) -> dict:
    """The JSON object of a frame's body, or :class:`FrameError` saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"frame refused: not UTF-8 (byte {exc.start}: {exc.reason})") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise FrameError("frame refused: JSON nested too deeply") from None
    except ValueError as exc:
        raise FrameError(f"frame refused: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame refused: a frame holds one JSON object, not {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(body) and _has_lone_surrogate(obj):
        raise FrameError("frame refused: a string holds a lone UTF-16 surrogate (not valid Unicode)")
    return obj


def _has_lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:  # iterative: the nesting depth was the decoder's to bound, not ours to recurse on
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_fd_count(obj: dict, received: int) -> None:
    declared = obj.get("fds", 0)
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 0:
        raise FrameError(f"frame refused: 'fds' must be the count of descriptors attached (a non-negative integer), not {declared!r}")
    if declared != received:
        raise FrameError(f"frame refused: it declares {declared} descriptor(s) and {received} arrived; "
                         "send the count of the descriptors attached to the frame's first byte")


async def _recv_header(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> tuple[bytes, list[int]]:
    header = b""
    fds: list[int] = []
    while len(header) < _HEADER:
        try:
            data, ancdata, flags, _ = sock.recvmsg(_HEADER - len(header), _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
        except BlockingIOError:
            await _wait(loop, sock, write=False)
            continue
        except BaseException:
            close_all(fds)
            raise
        fds += _descriptors(ancdata)
        if flags & socket.MSG_CTRUNC:
            close_all(fds)
            raise FrameError(f"frame refused: more than {MAX_FDS} descriptors attached", fatal=True)
        if not data:
            close_all(fds)
            if not header:
                raise EOFError("the peer closed the connection")
            raise FrameError(f"truncated frame: the connection closed after {len(header)} of 4 header bytes",
                             fatal=True)
        header += data
    return header, fds


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, length: int) -> bytearray:
    buffer = bytearray(length)
    view = memoryview(buffer)
    got = 0
    while got < length:
        n = await loop.sock_recv_into(sock, view[got:])
        if n == 0:
            raise FrameError(f"truncated frame: the connection closed after {got} of {length} bytes", fatal=True)
        got += n
    return buffer  # decoded in place: a copy of up to 16 MiB would buy nothing


def _descriptors(ancdata: list) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def close_all(fds: Sequence[int]) -> None:
    """Close received descriptors (one already gone is not an error)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


async def _wait(loop: asyncio.AbstractEventLoop, sock: socket.socket, *, write: bool) -> None:
    ready = loop.create_future()
    fd = sock.fileno()
    add, remove = (loop.add_writer, loop.remove_writer) if write else (loop.add_reader, loop.remove_reader)
    add(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        remove(fd)

"""Protocol 5's frames on a blocking socket, for the fast lane (both sides).

The same frames as :mod:`.framing`, but read by a caller that waits in ``recv`` itself; a lane
carries no descriptors, so any that arrive are closed and their frame refused.
"""

from __future__ import annotations

import socket

from .framing import _ANCILLARY, _HEADER, MAX_FRAME, FrameError, _descriptors, close_all, decode_body


def read_frame(sock: socket.socket) -> dict:
    """The next frame's object. ``EOFError`` when the peer closed between frames; ``FrameError``
    otherwise (``fatal`` when the stream is out of step)."""
    header = b""
    stray: list[int] = []
    while len(header) < _HEADER:
        data, ancdata, _flags, _ = sock.recvmsg(_HEADER - len(header), _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
        stray += _descriptors(ancdata)
        if not data:
            close_all(stray)
            if not header:
                raise EOFError("the peer closed the lane")
            raise FrameError(f"truncated frame: the lane closed after {len(header)} of 4 header bytes", fatal=True)
        header += data
    close_all(stray)
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        raise FrameError(f"frame refused: its length {length} is over the limit of {MAX_FRAME} bytes", fatal=True)
    body = bytearray(length)
    view = memoryview(body)
    got = 0
    while got < length:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise FrameError(f"truncated frame: the lane closed after {got} of {length} bytes", fatal=True)
        got += n
    if stray:
        raise FrameError("frame refused: a fast lane carries no descriptors")
    return decode_body(body)

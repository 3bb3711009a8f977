"""The server's side of the fast lane (:mod:`.lane_service`): a short read answered while we wait.

The event loop's thread sends the request and waits in ``poll`` up to :data:`FAST_WAIT_S` for
the answer, as an in-process read of a small file holds the loop for the read; an answer that
takes longer (a large file, a slow disk) is awaited on the loop like any other, and other calls
use the connection meanwhile (one call at a time on a lane). A lane that fails in any way is
closed and the call goes on the connection instead: lane calls change nothing in the
workspace, so sending one again is safe, and the connection says whether the worker is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import select
import socket

from .framing import FrameError, _wait, encode_frame
from .lane_frames import read_frame

FAST_WAIT_S = 0.001
"""How long the loop's thread waits for a lane's answer before awaiting it instead: several times
a small read's round trip here (0.14-0.19 ms), short enough that a large or slow read holds the
server's other calls no longer than an in-process read of a small file would."""


class LaneLost(Exception):
    """The lane cannot carry this call (closed, out of step): send it on the connection."""


class Lane:
    def __init__(self, sock: socket.socket, methods: frozenset[str]) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.methods = methods
        self.busy = False
        self._ids = itertools.count(1)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    @property
    def closed(self) -> bool:
        return self.sock.fileno() == -1

    async def call(self, method: str, params: dict) -> dict:
        """The answer frame's object (``result`` or ``error``); :class:`LaneLost` if it cannot be had."""
        request_id = next(self._ids)
        try:
            data = encode_frame({"id": request_id, "method": method, "params": params})
        except FrameError as exc:
            raise LaneLost(exc.message) from None
        self.busy = True
        try:
            self.sock.sendall(data)
            if not self._poll.poll(FAST_WAIT_S * 1000):
                await _wait(asyncio.get_running_loop(), self.sock, write=False)  # framing's readiness wait
            obj = read_frame(self.sock)
        except (OSError, EOFError, FrameError) as exc:
            self.close()
            raise LaneLost(str(exc)) from None
        except BaseException:
            # Cancelled while the worker still works on it: its answer would come to the next call.
            self.close()
            raise
        finally:
            self.busy = False
        if obj.get("id") != request_id:
            self.close()
            raise LaneLost(f"the lane answered request {obj.get('id')!r}, not {request_id}")
        return obj

    def close(self) -> None:
        if not self.closed:
            self._poll.unregister(self.sock)
            self.sock.close()

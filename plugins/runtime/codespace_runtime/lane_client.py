"""The server's side of the fast lane (:mod:`.lane_service`): a short read answered while we wait.

The event loop's thread sends the request and waits up to :data:`FAST_WAIT_S` for the answer, as
an in-process read of a small file holds the loop for the read: it polls the socket for the
first ``spin_s`` of that (the policy's ``runtime.lane_spin_us``), so the answer finds it awake,
then sleeps in ``poll``. An answer that takes longer (a large file, a slow disk) is awaited on
the loop like any other, and other calls use the connection meanwhile (one call at a time on a
lane). A lane that fails in any way is closed and the call goes on the connection instead: lane
calls change nothing in the workspace, so sending one again is safe, and the connection says
whether the worker is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import select
import socket
import time

from .framing import FrameError, _wait, encode_frame
from .lane_frames import read_frame

FAST_WAIT_S = 0.001
"""How long the loop's thread waits for a lane's answer before awaiting it instead: several times
a small read's round trip here (0.14-0.19 ms), short enough that a large or slow read holds the
server's other calls no longer than an in-process read of a small file would."""


def spin_seconds(policy: object) -> float:
    """The policy's ``runtime.lane_spin_us`` in seconds: how long each end of a lane polls."""
    return policy.runtime.lane_spin_us / 1_000_000  # type: ignore[attr-defined]


class LaneLost(Exception):
    """The lane cannot carry this call (closed, out of step): send it on the connection."""


class Lane:
    def __init__(self, sock: socket.socket, methods: frozenset[str], spin_s: float = 0.0) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.methods = methods
        self.spin_s = min(spin_s, FAST_WAIT_S)
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
            if not self._answered():
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

    def _answered(self) -> bool:
        """Whether the answer is readable within :data:`FAST_WAIT_S`: polled for the first
        ``spin_s``, slept on for the rest."""
        wait_s = FAST_WAIT_S
        if self.spin_s:
            poll, clock = self._poll.poll, time.perf_counter
            end = clock() + self.spin_s
            while clock() < end:
                if poll(0):
                    return True
            wait_s -= self.spin_s
        return wait_s > 0 and bool(self._poll.poll(wait_s * 1000))

    def close(self) -> None:
        if not self.closed:
            self._poll.unregister(self.sock)
            self.sock.close()

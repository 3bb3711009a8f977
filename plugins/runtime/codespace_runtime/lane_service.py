"""The worker's side of the fast lane: short read-only calls answered by a thread that blocks.

A read through the connection costs a trip round each side's event loop, twice (the request's
task, the answer's delivery): about 0.2 ms here on top of the socket's own round trip, which is
more than the read itself (benchmarks/README-worker.md). On the lane the server blocks for the
answer, as an in-process read blocks, and this side's thread sleeps in ``recv``: the kernel wakes
each side directly.

A lane is opened on an authenticated connection (``lane.open``, carrying one end of a socket pair
the server made), so it has no handshake of its own and ends with that connection. It serves
:data:`LANE_METHODS` only, one request at a time and in order, through the connection's own
handlers (the same parsing and judging of every path) and error mapping. Frames are protocol 5's;
a lane carries no descriptors (any that arrive are closed and the frame refused).
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping

from pydantic import ValidationError

from . import protocol as p
from .framing import FrameError, close_all, encode_frame
from .lane_frames import read_frame

LANE_METHODS = frozenset({"fs.read_file", "fs.stat"})
"""Read-only and short: a file read is inline only up to a small size (larger ones go to a thread
of the lane's own loop), a stat is one call. Nothing on the lane changes the workspace, so a lane
call lost with its worker is safe to retry."""
MAX_LANES = 4
"""Lanes one connection may open (each is a thread of this process)."""

_log = logging.getLogger("codespace_runtime.lane")
ErrorFor = Callable[[str, BaseException], p.Error]
"""The connection's mapping of a handler's exception to the answer's error."""


class Lanes:
    """The lanes of one connection: opened by ``lane.open``, closed with the connection."""

    def __init__(self, handlers: Mapping[str, Callable], error_for: ErrorFor, spin_s: float = 0.0) -> None:
        self._handlers = handlers
        self._error_for = error_for
        self._spin_s = spin_s
        self._socks: list[socket.socket] = []

    def open(self, fds: list[int]) -> dict:
        """``lane.open``'s answer; raises ValueError (bad params, nothing started)."""
        if len(fds) != 1:
            close_all(fds)
            raise ValueError(f"lane.open needs exactly one descriptor (a stream socket), not {len(fds)}")
        try:
            sock = socket.socket(fileno=fds[0])
        except OSError as exc:
            close_all(fds)
            raise ValueError(f"lane.open needs a socket descriptor ({exc})") from None
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            sock.close()
            raise ValueError("lane.open needs a Unix stream socket")
        self._socks = [s for s in self._socks if s.fileno() != -1]
        if len(self._socks) >= MAX_LANES:
            sock.close()
            raise ValueError(f"lane.open refused: this connection already has {MAX_LANES} lanes open")
        sock.setblocking(True)
        self._socks.append(sock)
        threading.Thread(target=_serve_lane, args=(sock, self._handlers, self._error_for, self._spin_s),
                         name="codespace-lane", daemon=True).start()
        return {"methods": sorted(LANE_METHODS)}

    def close(self) -> None:
        """The connection is over: its lanes end (their server side hears end of file)."""
        for sock in self._socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._socks.clear()


def _serve_lane(sock: socket.socket, handlers: Mapping[str, Callable], error_for: ErrorFor, spin_s: float) -> None:
    try:
        asyncio.run(_serve(sock, handlers, error_for, spin_s))
    except Exception:  # noqa: BLE001 - a lane's failure ends the lane, never the worker
        _log.exception("a fast lane failed; its server falls back to the connection")
    finally:
        sock.close()


async def _serve(sock: socket.socket, handlers: Mapping[str, Callable], error_for: ErrorFor, spin_s: float) -> None:
    waiting = _Waiting(sock, spin_s)
    while True:
        waiting.for_request()
        try:
            obj = read_frame(sock)  # blocks this thread (and its loop, which has nothing else to do)
        except EOFError:
            return
        except FrameError as exc:
            _send(sock, p.error_frame(None, p.Error(code=p.FRAME, message=exc.message)))
            if exc.fatal:
                return
            continue
        waiting.got_request()
        try:
            request = p.Request.model_validate(obj)  # the connection's own envelope rules
        except (ValidationError, RecursionError) as exc:
            request_id = obj.get("id") if type(obj.get("id")) is int else None
            _send(sock, p.error_frame(request_id, p.Error(code=p.BAD_REQUEST, message=p.request_problem(exc))))
            continue
        request_id, method, params = request.id, request.method, request.params
        if method not in LANE_METHODS:
            _send(sock, p.error_frame(request_id, p.Error(code=p.UNKNOWN_METHOD, message=(
                f"{method!r} is not served on the fast lane (it serves {', '.join(sorted(LANE_METHODS))}); "
                "send it on the connection"))))
            continue
        try:
            result = await handlers[method](params, [])
            frame = p.result_frame(request_id, result)
        except Exception as exc:  # noqa: BLE001 - every outcome becomes an answer
            frame = p.error_frame(request_id, error_for(method, exc))
        if not _send(sock, frame):
            return


class _Waiting:
    """How the lane's thread waits for the next request: while requests come closely (the last
    one within ``spin_s`` of the answer before it), it polls the socket for up to ``spin_s``, so
    the next finds it awake; otherwise, and after that long, it sleeps in ``recv``. The end of a
    burst of reads costs one poll of ``spin_s``."""

    def __init__(self, sock: socket.socket, spin_s: float) -> None:
        self._spin_s = spin_s
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._since = 0.0
        self._close_together = False

    def for_request(self) -> None:
        """Called when the lane is idle (the last answer sent, or none yet)."""
        clock = time.perf_counter
        self._since = clock()
        if self._close_together:
            poll, end = self._poll.poll, self._since + self._spin_s
            while clock() < end and not poll(0):
                pass

    def got_request(self) -> None:
        self._close_together = time.perf_counter() - self._since <= self._spin_s


def _send(sock: socket.socket, frame: dict) -> bool:
    try:
        sock.sendall(encode_frame(frame))
    except FrameError as exc:
        error = p.Error(code=p.FAILED, message=f"the answer could not be sent: {exc.message}", dispatched=True)
        return _send(sock, p.error_frame(frame.get("id"), error))
    except OSError:
        return False
    return True

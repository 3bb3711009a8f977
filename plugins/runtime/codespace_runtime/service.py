"""The worker's side of protocol 5 on one connection (:func:`serve_connection`; the listener
that accepts them is ``listener.py``).

A connection greets, waits for ``hello`` (answering only ``status`` before it), then runs each
request as its own task, so a slow ``fs.walk`` does not hold up a ``ping``. Nothing a peer sends
ends the worker: a bad frame is answered or, when the stream is out of step, the connection is
closed; the listener and the other connections go on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from pydantic import ValidationError

from . import protocol as p
from .framing import FrameError, send_frame
from .framing import close_all as _close
from .lane_service import Lanes
from .reader import FrameReader

Handler = Callable[[dict, list[int]], Awaitable["dict | tuple[dict, list[int]]"]]
ErrorMapper = Callable[[BaseException], "p.Error | None"]
Drain = Callable[[], Awaitable[None]]
"""Work a stopping listener does before it closes its connections."""

MAX_IN_FLIGHT = 64
"""Requests one connection may have running at once; more are refused (``busy``, not dispatched)."""
HELLO_TIMEOUT = 10.0
"""Seconds a connection may stay without a ``hello`` before it is closed."""
PRE_HELLO_FRAME = 64 * 1024
"""The largest frame read before hello: a hello (or a status) is a few hundred bytes."""

BUILT_INS = ("ping", "status", "shutdown", "cancel", "lane.open")
_INLINE = frozenset({"ping", "cancel"})
_log = logging.getLogger("codespace_runtime.service")
_current: contextvars.ContextVar[Connection] = contextvars.ContextVar("codespace_runtime_connection")
_STARTED = time.monotonic()


class BadParams(Exception):
    """Raised by a handler that refuses its params before doing anything: the answer says
    ``dispatched: false`` (safe to retry with corrected params)."""


def current_connection() -> Connection:
    """The connection whose request the calling handler is serving (to send it notifications)."""
    return _current.get()


class Connections:
    """The authenticated connections of a listener, for notifications every client should see."""

    def __init__(self) -> None:
        self._open: set[Connection] = set()

    async def broadcast(self, method: str, params: dict) -> None:
        for connection in list(self._open):
            await connection.notify(method, params)


class Connection:
    def __init__(self, sock: socket.socket, token: bytes, handlers: Mapping[str, Handler],
                 status: Callable[[], dict], *, errors: ErrorMapper | None, welcome: dict,
                 stop: asyncio.Event | None, hub: Connections | None, lane_spin_s: float = 0.0) -> None:
        self.sock = sock
        self._token = token
        self._handlers = handlers
        self._status = status
        self._errors = errors
        self._welcome = welcome
        self._stop = stop
        self._hub = hub
        self._write = asyncio.Lock()
        self._tasks: dict[int, asyncio.Task] = {}
        self._answering: set[int] = set()  # requests whose answer is being sent: no longer cancellable
        self._pending_answers: set[asyncio.Future] = set()  # held: the loop keeps only weak references
        self._nonce = secrets.token_hex(p.NONCE_BYTES)
        self.client: str | None = None
        self._open = True
        self._reader: FrameReader | None = None
        self._lanes = Lanes(handlers, self._map_error, lane_spin_s)

    @property
    def is_open(self) -> bool:
        """False once the connection is being torn down (its peer hears nothing more)."""
        return self._open

    async def notify(self, method: str, params: dict, fds: Sequence[int] = ()) -> None:
        """Send a notification; a connection that has gone is skipped (its client hears nothing)."""
        if self._open:
            try:
                await self._send({"method": method, "params": params}, fds)
            except (OSError, FrameError) as exc:
                _log.warning("notification %s not sent: %s", method, exc)

    async def _send(self, frame: dict, fds: Sequence[int] = ()) -> None:
        async with self._write:
            await send_frame(self.sock, frame, fds)

    async def _answer(self, request_id: int, frame: dict, fds: Sequence[int] = ()) -> None:
        """Send a request's answer. From here on a ``cancel`` leaves the request alone: its work
        is over, and cancelling the send would leave half a frame on the stream, out of step for
        every later answer (found by testing: the client then waited forever)."""
        self._answering.add(request_id)
        try:
            await self._send(frame, fds)
        finally:
            self._answering.discard(request_id)

    async def _send_error(self, request_id: int | None, code: str, message: str, *,
                          dispatched: bool = False, data: dict | None = None) -> None:
        error = p.Error(code=code, message=message, dispatched=dispatched, data=data or {})
        await self._send(p.error_frame(request_id, error))

    async def run(self) -> None:
        # Until hello proves the token, a frame is small and read one at a time: a connection
        # that never says hello holds kilobytes, not a full frame's 16 MiB (found by testing).
        self._reader = FrameReader(self.sock, max_frame=PRE_HELLO_FRAME, max_ahead=1)
        try:
            await self._send(p.Greeting(protocols=[p.PROTOCOL], nonce=self._nonce,
                                        worker=p.WORKER_VERSION).model_dump())
            if await self._handshake():
                await self._serve()
        except (OSError, EOFError):
            pass  # the peer went away: nothing to answer
        finally:
            self._open = False
            self._lanes.close()
            if self._hub is not None:
                self._hub._open.discard(self)
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._reader.close()

    async def _next_request(self) -> tuple[p.Request, list[int]] | None:
        """The next well-formed request, answering (or, out of step, giving up on) bad frames.
        None when the connection is over."""
        while True:
            try:
                obj, fds = await self._reader.next()
            except EOFError:
                return None
            except FrameError as exc:
                await self._send_error(None, p.FRAME, exc.message)
                if exc.fatal:
                    return None
                continue
            try:
                return p.Request.model_validate(obj), fds
            except (ValidationError, RecursionError) as exc:
                _close(fds)
                request_id = obj.get("id") if type(obj.get("id")) is int else None
                await self._send_error(request_id, p.BAD_REQUEST, p.request_problem(exc))

    async def _handshake(self) -> bool:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT):
                while True:
                    got = await self._next_request()
                    if got is None:
                        return False
                    request, fds = got
                    _close(fds)
                    if request.method == "status":
                        await self._send(p.result_frame(request.id, _liveness()))
                    elif request.method == "hello":
                        return await self._hello(request)
                    else:
                        await self._send_error(request.id, p.NOT_AUTHENTICATED,
                                               f"{request.method!r} refused: the connection has not said hello. "
                                               "To proceed: send 'hello' with protocol 5 and the token's proof first "
                                               "(only 'status' is answered before it).")
        except TimeoutError:
            return False

    async def _hello(self, request: p.Request) -> bool:
        try:
            hello = p.Hello.model_validate(request.params)
        except ValidationError as exc:
            if type(request.params.get("protocol")) is int and request.params["protocol"] != p.PROTOCOL:
                await self._send_error(request.id, p.PROTOCOL_MISMATCH, p.mismatch_message(request.params["protocol"]))
            else:
                await self._send_error(request.id, p.BAD_PARAMS, f"hello refused: {p.request_problem(exc)}")
            return False
        if hello.protocol != p.PROTOCOL:
            await self._send_error(request.id, p.PROTOCOL_MISMATCH, p.mismatch_message(hello.protocol))
            return False
        if not p.proof_matches(self._token, self._nonce, hello.proof):
            await self._send_error(request.id, p.BAD_PROOF,
                                   "hello refused: the proof does not match this worker's token. To proceed: "
                                   "read the token file the worker was started with (--token-file) and send "
                                   "HMAC-SHA256(token, nonce) of this connection's greeting.")
            return False
        self.client = hello.client
        self._reader.limit()
        if self._hub is not None:
            self._hub._open.add(self)
        await self._send(p.result_frame(request.id, self._welcome))
        return True

    async def _serve(self) -> None:
        while True:
            got = await self._next_request()
            if got is None:
                return
            request, fds = got
            problem = self._refusal(request)
            if problem is not None:
                _close(fds)
                await self._send_error(request.id, *problem)
                continue
            if request.method == "shutdown":
                await self._send(p.result_frame(request.id, {"stopping": True}))
                if self._stop is not None:
                    self._stop.set()
                return
            if request.method in _INLINE:
                # Answered in place: a task would cost a trip round the loop for a reply that never waits.
                await self._dispatch(request, fds)
                continue
            task = asyncio.create_task(self._dispatch(request, fds))
            self._tasks[request.id] = task
            task.add_done_callback(lambda t, rid=request.id, fds=fds: self._settled(t, rid, fds))

    def _settled(self, task: asyncio.Task, request_id: int, fds: list[int]) -> None:
        self._tasks.pop(request_id, None)
        if task.cancelled() and self._open:
            # Cancelled before its first step: _dispatch never ran, so nothing answered it and
            # its descriptors are still here (found by testing: the client waited for an answer
            # that never came). Nothing ran: not dispatched.
            _close(fds)
            answering = asyncio.ensure_future(self._cancelled_before_start(request_id))
            self._pending_answers.add(answering)
            answering.add_done_callback(self._pending_answers.discard)

    async def _cancelled_before_start(self, request_id: int) -> None:
        error = p.Error(code=p.CANCELLED, message="cancelled before it started; nothing ran", dispatched=False)
        try:
            await self._answer(request_id, p.error_frame(request_id, error))
        except (OSError, FrameError):
            pass  # the connection went: nobody is left to answer

    def _refusal(self, request: p.Request) -> tuple[str, str] | None:
        if request.method == "hello":
            return p.BAD_REQUEST, "hello refused: this connection has already said hello."
        if request.id in self._tasks:
            return p.BAD_REQUEST, (f"request {request.id} refused: a request with this id is still running. "
                                   "To proceed: give every request in flight its own id.")
        if len(self._tasks) >= MAX_IN_FLIGHT:
            return p.BUSY, (f"{request.method!r} refused: {MAX_IN_FLIGHT} requests are already running on this "
                            "connection. To proceed: wait for some to finish, then retry.")
        if request.method not in BUILT_INS and request.method not in self._handlers:
            known = ", ".join(sorted({*BUILT_INS, *self._handlers}))
            return p.UNKNOWN_METHOD, f"unknown method {request.method!r}. This worker serves: {known}."
        return None

    async def _dispatch(self, request: p.Request, fds: list[int]) -> None:
        _current.set(self)
        result: dict
        out_fds: list[int] = []
        try:
            outcome = await self._call(request, fds)
            result, out_fds = (outcome[0], list(outcome[1])) if isinstance(outcome, tuple) else (outcome, [])
            if not isinstance(result, dict):
                raise TypeError(f"the handler returned {type(result).__name__}, not a dict")
        except BaseException as exc:  # noqa: BLE001 - every outcome becomes an answer
            if not self._open:
                return  # the connection is being torn down: nobody is left to answer
            error = self._map_error(request.method, exc)
            try:
                await self._answer(request.id, p.error_frame(request.id, error))
            except (OSError, FrameError):
                pass
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return
        try:
            await self._answer(request.id, p.result_frame(request.id, result), out_fds)
        except FrameError as exc:
            await self._send_error(request.id, p.FAILED, f"{request.method} ran, but its result could not be "
                                   f"sent: {exc.message}", dispatched=True)
        except OSError:
            pass
        finally:
            _close(out_fds)  # sent or not, the worker's copies are not needed any more

    async def _call(self, request: p.Request, fds: list[int]) -> dict | tuple[dict, list[int]]:
        method, params = request.method, request.params
        if method == "ping":
            _close(fds)
            return {"pong": True}
        if method == "status":
            _close(fds)
            return {**_liveness(), "pid": os.getpid(), "uptime_s": round(time.monotonic() - _STARTED, 3),
                    "connection": {"client": self.client, "in_flight": len(self._tasks)}, **self._status()}
        if method == "cancel":
            _close(fds)
            target = params.get("id")
            if type(target) is not int:
                raise BadParams("cancel needs params {'id': <the id of a request in flight>}")
            task = self._tasks.get(target)
            cancelled = task is not None and target != request.id and target not in self._answering and task.cancel()
            return {"cancelled": bool(cancelled)}
        if method == "lane.open":  # one end of a socket pair: short reads answered by a thread (lane_service)
            try:
                return self._lanes.open(fds)
            except ValueError as exc:
                raise BadParams(str(exc)) from None
        return await self._handlers[method](params, fds)

    def _map_error(self, method: str, exc: BaseException) -> p.Error:
        if isinstance(exc, asyncio.CancelledError):
            return p.Error(code=p.CANCELLED, message=f"{method} was cancelled; it may have partly run.",
                           dispatched=True)
        if isinstance(exc, BadParams):
            return p.Error(code=p.BAD_PARAMS, message=f"{method} refused: {exc}", dispatched=False)
        if self._errors is not None and isinstance(exc, Exception):
            try:
                mapped = self._errors(exc)
            except Exception as mapping_failed:  # noqa: BLE001 - a broken mapping must not lose the answer
                _log.exception("the error mapping failed on %r", exc)
                exc = mapping_failed
            else:
                if mapped is not None:
                    return mapped
        _log.error("%s failed: %s: %s", method, type(exc).__name__, exc)
        return p.Error(code=p.FAILED, message=f"{method} failed in the worker: {type(exc).__name__}: {exc}",
                       dispatched=True, data={"type": type(exc).__name__})


def _liveness() -> dict:
    return {"protocols": [p.PROTOCOL], "worker": p.WORKER_VERSION, "alive": True}


def welcome(*, workspace: str, policy_digest: str | None) -> dict:
    return p.Welcome(policy_digest=policy_digest, pid=os.getpid(), uid=os.getuid(), workspace=workspace).model_dump()


async def serve_connection(sock: socket.socket, token: bytes, handlers: Mapping[str, Handler],
                           status: Callable[[], dict], *, errors: ErrorMapper | None = None,
                           workspace: str = "", policy_digest: str | None = None,
                           stop: asyncio.Event | None = None, hub: Connections | None = None,
                           lane_spin_s: float = 0.0) -> None:
    """Serve one connected socket (non-blocking) until the peer closes it, the stream is out of
    step or a ``shutdown`` arrives (which sets ``stop``). The socket is closed on return.
    ``lane_spin_s``: how long its fast lanes poll for a request (``runtime.lane_spin_us``)."""
    sock.setblocking(False)
    connection = Connection(sock, token, handlers, status, errors=errors, stop=stop, hub=hub,
                            welcome=welcome(workspace=workspace, policy_digest=policy_digest),
                            lane_spin_s=lane_spin_s)
    try:
        await connection.run()
    finally:
        sock.close()

"""The server's side of protocol 5: one authenticated connection to a worker, many calls on it.

Calls are multiplexed by id: each waits for its own answer while a reader task delivers
answers and notifications as they come. When the connection drops, every call still waiting
fails with :class:`WorkerGone`, saying whether its request had been sent (it may have run).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Callable, Sequence

import anyio
from pydantic import ValidationError

from . import protocol as p
from .framing import FrameError, send_frame
from .framing import close_all as _close
from .lane_client import Lane, LaneLost
from .lane_service import LANE_METHODS
from .reader import FrameReader

_log = logging.getLogger("codespace_runtime.client")
NotificationCallback = Callable[[str, dict, list[int]], None]


CANCEL_ANSWER_S = 10.0
"""How long a cancelled call waits for the worker to say whether the work was done."""


class WorkerError(Exception):
    """The worker could not be talked to (handshake failed, protocol broken)."""


class WorkerCallError(WorkerError):
    """The worker answered a call with an error."""

    def __init__(self, code: str, message: str, dispatched: bool, data: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.dispatched = dispatched
        self.data = data or {}


class WorkerGone(WorkerError):
    """The connection dropped before the answer came. ``dispatched``: the request had been sent
    whole, so the worker may have run it."""

    def __init__(self, dispatched: bool, reason: str = "the connection to the worker closed") -> None:
        super().__init__(f"{reason} ({'the request was sent and may have run' if dispatched else 'the request was not sent'})")
        self.dispatched = dispatched


async def read_greeting(reader: FrameReader) -> p.Greeting:
    try:
        obj, fds = await reader.next()
    except EOFError:
        raise WorkerError("the worker closed the connection before greeting (is this uid allowed to connect?)") from None
    except FrameError as exc:
        raise WorkerError(f"the worker's greeting could not be read: {exc.message}") from None
    _close(fds)
    try:
        return p.Greeting.model_validate(obj)
    except ValidationError:
        raise WorkerError(f"not a protocol-5 worker: its first frame is not a greeting ({str(obj)[:200]})") from None


async def request_once(sock: socket.socket, reader: FrameReader, request_id: int, method: str,
                       params: dict) -> dict:
    """Send one request and read frames until its answer (before the reader task exists)."""
    await send_frame(sock, {"id": request_id, "method": method, "params": params})
    while True:
        try:
            obj, fds = await reader.next()
        except EOFError:
            raise WorkerGone(True, f"the worker closed the connection during {method!r}") from None
        except FrameError as exc:
            raise WorkerError(f"the worker's answer to {method!r} could not be read: {exc.message}") from None
        _close(fds)
        if obj.get("id") == request_id:
            return _result(obj)


async def fetch_status(sock: socket.socket) -> dict:
    """The worker's pre-hello ``status`` (versions and liveness), with no token."""
    sock.setblocking(False)
    reader = FrameReader(sock)
    try:
        greeting = await read_greeting(reader)
        return {**await request_once(sock, reader, 0, "status", {}), "greeting_protocols": greeting.protocols}
    finally:
        reader.close()


class WorkerClient:
    def __init__(self, sock: socket.socket, welcome: p.Welcome, reader: FrameReader) -> None:
        self.sock = sock
        self.welcome = welcome
        self._frames = reader
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._write = asyncio.Lock()
        self._callbacks: list[NotificationCallback] = []
        self._on_lost: list[Callable[[str], None]] = []
        self._gone: WorkerGone | None = None
        self._lane: Lane | None = None
        self._lane_state = "unopened"  # "opening", "open", "refused" (a worker without lanes)
        self.lane_spin_s = 0.0
        """How long this side polls for a lane's answer before it sleeps (the policy's
        ``runtime.lane_spin_us``, set by whoever made the client)."""
        self._reader = asyncio.create_task(self._read_forever())

    @classmethod
    async def connect(cls, sock: socket.socket, token: bytes, client: str) -> WorkerClient:
        """Greeting, ``hello`` with the token's proof, ``welcome``; raises :class:`WorkerError`
        (or :class:`WorkerCallError` for a refused hello: a version mismatch names both)."""
        sock.setblocking(False)
        reader = FrameReader(sock)
        try:
            return await cls._handshake(sock, reader, token, client)
        except BaseException:
            reader.close()
            raise

    @classmethod
    async def _handshake(cls, sock: socket.socket, reader: FrameReader, token: bytes, client: str) -> WorkerClient:
        greeting = await read_greeting(reader)
        if p.PROTOCOL not in greeting.protocols:
            raise WorkerError(f"protocol mismatch: this client speaks protocol {p.PROTOCOL}, the worker offers "
                              f"{', '.join(map(str, greeting.protocols))}. To proceed: use a worker of the same "
                              "CodeSpace release.")
        hello = p.Hello(protocol=p.PROTOCOL, proof=p.proof(token, greeting.nonce), client=client)
        result = await request_once(sock, reader, 0, "hello", hello.model_dump())
        return cls(sock, p.Welcome.model_validate(result), reader)

    @property
    def is_open(self) -> bool:
        """False once the connection has dropped (every later call raises :class:`WorkerGone`)."""
        return self._gone is None

    @property
    def lane_state(self) -> str:
        """The fast lane's state, for the worker's status: "open", "refused" (a worker without
        lanes) or "closed" (not opened yet, or lost: the next lane call opens one)."""
        if self._lane is not None and not self._lane.closed:
            return "open"
        return "refused" if self._lane_state == "refused" else "closed"

    def on_notification(self, fn: NotificationCallback) -> NotificationCallback:
        """Call ``fn(method, params, fds)`` for every notification (it owns the descriptors)."""
        self._callbacks.append(fn)
        return fn

    def on_lost(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(reason)`` when the worker ends the connection (not when :meth:`close` does)."""
        self._on_lost.append(fn)

    async def call(self, method: str, params: dict, fds: Sequence[int] = ()) -> tuple[dict, list[int]]:
        """The result of ``method`` and the descriptors that came with it (now the caller's).
        ``fds`` are sent and stay the caller's. Cancelling the call asks the worker to cancel it."""
        if self._gone is not None:
            raise WorkerGone(False, str(self._gone).split(" (")[0])
        request_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        try:
            async with self._write:
                await send_frame(self.sock, {"id": request_id, "method": method, "params": params}, fds)
        except FrameError as exc:
            self._pending.pop(request_id, None)
            raise WorkerCallError(p.BAD_REQUEST, f"{method} not sent: {exc.message}", False) from None
        except (OSError, asyncio.CancelledError) as exc:
            # A partly written frame leaves the stream out of step: the connection is unusable.
            self._pending.pop(request_id, None)
            self._fail_all("the connection to the worker broke while sending")
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise WorkerGone(False, f"sending {method!r} failed: {exc}") from None
        try:
            return await asyncio.shield(answer)
        except asyncio.CancelledError:
            if self._gone is not None or answer.done() or method == "cancel":  # a cancel is not cancelled
                if answer.done() and not answer.cancelled() and answer.exception() is None:
                    return answer.result()  # answered as the cancellation came: the work was done
                raise
            # Ask the worker to stop, and wait for its answer: the work may be past its point of no
            # return, and then the caller must record what was done, not a cancellation (found by
            # testing: a cancelled write_file was recorded cancelled with the file written).
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_ANSWER_S) as waiting:
                await self._cancel_quietly(request_id)
                try:
                    return await answer
                except WorkerError:
                    pass  # cancelled there too (or failed): the caller's cancellation stands
            if waiting.cancelled_caught:
                _log.warning("the worker did not answer cancelled %s (request %s) within %s s; it is recorded as "
                             "cancelled, though it may have run", method, request_id, CANCEL_ANSWER_S)
            raise
        finally:
            self._pending.pop(request_id, None)

    async def call_fast(self, method: str, params: dict) -> dict | None:
        """The result of ``method`` on the fast lane (lane_client), or None when it cannot go there
        (not a lane method, the lane busy or lost): then :meth:`call` it. Errors as :meth:`call`'s."""
        if method not in LANE_METHODS:
            return None
        lane = self._lane
        if lane is None or lane.closed:
            if self._lane_state in ("opening", "refused") or self._gone is not None:
                return None
            lane = await self._open_lane()
        if lane is None or lane.busy or method not in lane.methods:
            return None
        try:
            return _result(await lane.call(method, params))
        except LaneLost as exc:
            _log.info("the fast lane is lost (%s); calls go on the connection until it reopens", exc)
            return None

    async def _open_lane(self) -> Lane | None:
        self._lane_state = "opening"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            result, fds = await self.call("lane.open", {}, [theirs.fileno()])
        except WorkerError as exc:
            ours.close()
            # A worker without lanes is served on the connection from now on; one at its limit of
            # lanes (an old lane not yet reaped) is asked again later; one that is gone says so there.
            unknown = isinstance(exc, WorkerCallError) and exc.code == p.UNKNOWN_METHOD
            self._lane_state = "refused" if unknown else "unopened"
            return None
        finally:
            theirs.close()
        _close(fds)
        self._lane = Lane(ours, frozenset(m for m in result.get("methods", ()) if isinstance(m, str)), self.lane_spin_s)
        self._lane_state = "open"
        return self._lane

    async def _cancel_quietly(self, request_id: int) -> None:
        try:
            await self.call("cancel", {"id": request_id})
        except WorkerError:
            pass

    async def _read_forever(self) -> None:
        reason = "the worker closed the connection"
        try:
            while True:
                obj, fds = await self._frames.next()
                self._deliver(obj, fds)
        except EOFError:
            pass
        except FrameError as exc:
            reason = f"the worker sent a frame that could not be read: {exc.message}"
        except OSError as exc:
            reason = f"the connection to the worker failed: {exc}"
        except asyncio.CancelledError:
            self._fail_all("the client was closed")
            return  # closed on purpose: nothing was lost
        self._fail_all(reason)
        for fn in self._on_lost:
            try:
                fn(reason)
            except Exception:  # noqa: BLE001 - one bad listener must not hide the loss from the others
                _log.exception("connection-lost callback failed")

    def _deliver(self, obj: dict, fds: list[int]) -> None:
        request_id = obj.get("id")
        if "id" not in obj:
            method, params = obj.get("method"), obj.get("params", {})
            if not isinstance(method, str) or not isinstance(params, dict) or not self._callbacks:
                _close(fds)
                return
            for fn in self._callbacks:
                try:
                    fn(method, params, fds)
                except Exception:  # noqa: BLE001 - one bad listener must not stop the reader
                    _log.exception("notification callback failed on %s", method)
            return
        answer = self._pending.get(request_id) if type(request_id) is int else None
        if answer is None or answer.done():
            _close(fds)
            if request_id is None and "error" in obj:
                _log.warning("the worker refused a frame: %s", obj["error"])
            return
        try:
            answer.set_result((_result(obj), fds))
        except WorkerCallError as exc:
            _close(fds)
            answer.set_exception(exc)

    def _fail_all(self, reason: str) -> None:
        self._gone = WorkerGone(True, reason)
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(WorkerGone(True, reason))
        self._pending.clear()

    async def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        self._frames.close()
        self.sock.close()


def _result(obj: dict) -> dict:
    error = obj.get("error")
    if error is not None:
        try:
            e = p.Error.model_validate(error)
        except ValidationError:
            raise WorkerCallError(p.BAD_REQUEST, f"the worker sent a malformed error: {str(error)[:200]}", True) from None
        raise WorkerCallError(e.code, e.message, e.dispatched, e.data)
    result = obj.get("result")
    if not isinstance(result, dict):
        raise WorkerCallError(p.BAD_REQUEST, "the worker's answer has neither a result object nor an error", True)
    return result


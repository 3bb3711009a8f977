"""``tools/call`` answered straight from the stdio transport.

The SDK's per-request machinery (validation of the envelope into models, a task
and memory streams per request, result sieving) costs about 0.5 ms of server CPU
per call here, five times the gateway and the file read together. Tool calls are
almost all of an agent's traffic, so the stdio transport hands them to this
module instead. The call itself and its result are the same as on every other
road (:mod:`.calls`); what this module restates is the SDK's envelope, so the
bytes written are the SDK's (tests/test_every_road_answers_the_same_bytes.py).
Everything else is left to the front (:mod:`.front`: initialize, listing, pings)
and the SDK (the rest).

A call is taken only when its shape is plain: an id, a tool name, arguments as an
object, no input-required round trip, and a protocol version known to be served
(the one negotiated by ``initialize``, or a supported 2026-era version stamped on
the request). Anything else falls through to the SDK unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .calls import answer_call
from .wire import (
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    cancelled_id,
    encode,
    stamp_server_info,
    valid_id,
)

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..app import App
    from ..tooling import ToolRegistry

log = logging.getLogger(__name__)

Send = Callable[[bytes], Awaitable[None]]


class DirectToolCalls:
    def __init__(self, app_ready: anyio.Event, transport: str = "stdio") -> None:
        self.app: App | None = None  # set once built; calls wait for ``app_ready``
        self._app_ready = app_ready
        self.registry: ToolRegistry | None = None  # set before the App is (:meth:`tools_known`)
        self._tools_known = anyio.Event()
        self._classic: bytes | None = None
        self._transport = transport
        self._legacy_version: str | None = None
        self._pending_init: tuple[str, str | None] | None = None  # (negotiated version, client name)
        self._client: str | None = None
        self._running: dict[Any, anyio.CancelScope] = {}
        self.in_flight = 0  # calls taken and not yet answered
        self.taken: set[Any] = set()  # their request ids (the front refuses another request with one of them)
        self.tg: TaskGroup | None = None
        self.send: Send | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # calls run as plain asyncio tasks (see _spawn)

    def attach(self, tg: TaskGroup, send: Send) -> None:
        self.tg, self.send = tg, send

    def initialize(self, params: dict[str, Any], version: str) -> None:
        """The front answered ``initialize``: calls are served once it is confirmed."""
        info = params.get("clientInfo")
        self._pending_init = (version, info.get("name") if isinstance(info, dict) else None)
        self._legacy_version = None

    def handshake_done(self, version: str | None, message: dict[str, Any]) -> None:
        if self._pending_init is not None:
            self._legacy_version, self._client = self._pending_init

    def intercept(self, message: dict[str, Any], write: Any = None) -> bool:
        """Take the call or cancellation (True) or let the SDK have it (False)."""
        method = message.get("method")
        if method == "notifications/cancelled":
            scope = self._running.get(cancelled_id(message))
            if scope is None:
                return False
            scope.cancel()
            return True
        if method != "tools/call":
            return False
        request_id = message.get("id")
        params = message.get("params")
        if not valid_id(request_id) or not isinstance(params, dict):
            return False
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
            return False
        if params.get("inputResponses") is not None or params.get("requestState") is not None:
            return False
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        stamped = meta.get(PROTOCOL_VERSION_META_KEY)
        if stamped is not None:
            if stamped not in MODERN_PROTOCOL_VERSIONS:
                return False
            modern = True
        elif self._legacy_version is not None:
            modern = False
        else:
            return False
        client = self._client
        if modern:
            info = meta.get(CLIENT_INFO_META_KEY)
            client = info.get("name") if isinstance(info, dict) else None
        assert self.tg is not None and self.send is not None
        self.in_flight += 1
        self.taken.add(request_id)
        self._spawn(self._call, request_id, name, arguments, meta.get("progressToken"), modern, client, self.send)
        return True

    def tools_known(self, registry: ToolRegistry, classic: bytes | None) -> None:
        """Every tool is registered: enough for ``tools/list``, which need not wait for the rest
        of the App (the store, recovery, services) as calls do. ``classic``: the listing for
        the classic versions, when it was written already."""
        self.registry = registry
        self._classic = classic
        self._tools_known.set()

    def list_tools(self, request_id: Any, version: str, keep: Callable[[bytes], None]) -> None:
        """Answer a plain ``tools/list`` once every tool is registered, before the rest of the App
        is built (a start without a kept listing); ``keep`` gets the result's bytes for the next
        start."""
        self.in_flight += 1
        self.taken.add(request_id)
        self._spawn(self._listing, request_id, version, keep)

    async def _listing(self, request_id: Any, version: str, keep: Callable[[bytes], None]) -> None:
        from .listing import build_result
        from .tool_wire import CLASSIC_VERSIONS

        assert self.send is not None
        try:
            if not self._tools_known.is_set():
                await self._tools_known.wait()
            assert self.registry is not None
            if self._classic is not None and version in CLASSIC_VERSIONS:
                result = self._classic
            else:
                result = await anyio.to_thread.run_sync(build_result, self.registry, version)
        except Exception:
            log.exception("tools/list failed")
            await self.send(encode({"jsonrpc": "2.0", "id": request_id,
                                    "error": {"code": INTERNAL_ERROR, "message": "Internal error"}}))
            return
        finally:
            self.in_flight -= 1
            self.taken.discard(request_id)
        keep(result)
        await self.send(b'{"jsonrpc":"2.0","id":' + encode(request_id) + b',"result":' + result + b"}")

    def _spawn(self, run: Callable[..., Awaitable[None]], *args: Any) -> None:
        """One task per call. On asyncio a plain task: a task group's start_soon costs about
        50 µs of a 350 µs read_file (benchmarks/README.md, "Core"); :meth:`close` gives the
        calls the group's ending instead (cancelled, and waited for)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio)
            assert self.tg is not None
            self.tg.start_soon(run, *args)
            return
        task = loop.create_task(run(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """The connection ends: cancel the calls still running and wait until they have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            with anyio.CancelScope(shield=True):
                await asyncio.wait(tasks)

    async def _call(self, *args: Any) -> None:
        try:
            await self._answer(*args)
        finally:
            self.in_flight -= 1
            self.taken.discard(args[0])  # the request id

    async def _answer(self, request_id: Any, name: str, arguments: dict[str, Any] | None, token: Any,
                      modern: bool, client: str | None, send: Send) -> None:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            if token is None:
                return
            params: dict[str, Any] = {"progressToken": token, "progress": done}
            if total is not None:
                params["total"] = total
            if message is not None:
                params["message"] = message
            await send(encode({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}))

        with anyio.CancelScope() as scope:
            self._running[request_id] = scope
            try:
                if not self._app_ready.is_set():  # wait() checkpoints even when set
                    await self._app_ready.wait()
                assert self.app is not None
                result = await answer_call(self.app, name, arguments, transport=self._transport,
                                           client_name=client, modern=modern, progress=progress)
            except Exception:
                log.exception("tools/call %s failed", name)
                await send(encode({"jsonrpc": "2.0", "id": request_id,
                                    "error": {"code": INTERNAL_ERROR, "message": "Internal error"}}))
                return
            finally:
                self._running.pop(request_id, None)
        if scope.cancelled_caught:
            return  # the client cancelled: JSON-RPC sends no response
        if modern:
            stamp_server_info(result)  # the SDK's envelope, restated: this answer does not pass through it
        await send(encode({"jsonrpc": "2.0", "id": request_id, "result": result}))

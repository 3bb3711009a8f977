"""The SDK behind the stdio front, started when a request first needs it.

The front answers what agents send at start and on every turn (``initialize``,
``ping``, ``tools/list``, ``tools/call``); everything else — modern-era discovery,
methods we do not serve, malformed shapes — goes to the SDK's ``Server``, which is
imported and started on that first request, on a worker thread so the loop keeps
answering tool calls meanwhile.

One SDK connection serves each protocol era: requests carrying the 2026-07-28
envelope go to one, the rest to the other, which is first told the ``initialize``
the front already answered (its answer is dropped). A client that probes with the
modern protocol and then falls back to ``initialize`` on the same stream is so
served by both, where a single SDK connection refuses the second era.

On the way out, an ``Invalid params`` error (the SDK sends empty ``data``) gets
``data`` saying what was wrong, and a result the SDK cannot encode (a lone surrogate
from a file name) is written with \\u escapes instead of ending the connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.to_thread

from .wire import INVALID_PARAMS, LATEST_HANDSHAKE_VERSION, PROTOCOL_VERSION_META_KEY, REPLAY_ID, cancelled_id, encode

log = logging.getLogger(__name__)

Send = Callable[[bytes], Awaitable[None]]


def _import_sdk() -> None:
    # The import is the work (about 0.6 s), done on a thread so the loop answers meanwhile.
    import mcp.shared.message  # noqa: F401
    import mcp_types.methods  # noqa: F401

    from .. import server  # noqa: F401


def describe_invalid_params(method: str, params: Any, version: str | None, initialized: bool) -> str:
    """What a -32602 was about, without echoing argument values."""
    if not initialized and method not in ("ping", "initialize"):
        return ("the connection is not initialized: send initialize, then notifications/initialized, "
                "before other requests (or stamp each request with the 2026-07-28 _meta envelope)")
    return params_problem(method, params, version) or \
        f"the params of {method} do not match the MCP schema at protocol version {version}"


def params_problem(method: str, params: Any, version: str | None) -> str | None:
    """What in ``params`` the MCP schema of ``method`` refuses (None: nothing)."""
    from mcp_types.methods import validate_client_request
    from pydantic import ValidationError

    try:
        validate_client_request(method, version or LATEST_HANDSHAKE_VERSION, params)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("params",))
            problems.append(f"params.{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return "; ".join(problems) + f" (see the MCP schema of {method})"
    except (KeyError, ValueError):
        return f"{method} is not served at protocol version {version}"
    return None


class _Connection:
    """One ``Server.run`` over memory streams."""

    def __init__(self, bridge: SdkBridge, label: str) -> None:
        self.bridge = bridge
        self.label = label
        self.send_stream: Any = None
        self.initialized = False
        self.version: str | None = None

    async def start(self, tg: Any) -> None:
        from mcp.shared._context_streams import create_context_streams
        from mcp.shared.message import SessionMessage

        inbound_send, inbound = create_context_streams[SessionMessage | Exception](0)
        outbound, outbound_receive = create_context_streams[SessionMessage](0)
        self.send_stream = inbound_send
        server = self.bridge.server()
        tg.start_soon(self._write, outbound_receive)
        tg.start_soon(server.run, inbound, outbound, server.create_initialization_options())

    async def feed(self, line: bytes) -> None:
        import mcp_types as types
        from mcp.shared.message import SessionMessage

        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        await self.send_stream.send(SessionMessage(message))

    async def _write(self, outbound_receive: Any) -> None:
        import mcp_types as types

        async with outbound_receive:
            async for session_message in outbound_receive:
                message = session_message.message
                if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                    request_id = message.id
                    if request_id == REPLAY_ID:
                        continue
                    await self.bridge.answered(self, request_id, message)
                else:
                    await self.bridge.send(_dump(message))


def _dump(message: Any) -> bytes:
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    except Exception:  # noqa: BLE001 - pydantic refuses lone surrogates; json escapes them
        return encode(message.model_dump(by_alias=True, exclude_unset=True, mode="python"))


class SdkBridge:
    """Routes lines the front does not answer to SDK connections, per era."""

    def __init__(self, send: Send, app_ready: anyio.Event, build: Callable[[], Any], *, split_eras: bool) -> None:
        self.send = send
        self._app_ready = app_ready
        self._build = build
        self._server: Any = None
        self._split = split_eras
        self._connections: dict[str, _Connection] = {}
        self._starting = anyio.Lock()
        self.pending: dict[Any, tuple[_Connection, str, Any]] = {}  # request id -> (connection, method, params)
        self.on_answer: dict[Any, Callable[[bytes], None]] = {}  # request id -> observer of the result bytes
        self.handshake: tuple[dict[str, Any], bool] | None = None  # (initialize request, initialized sent)
        self.tg: Any = None

    def server(self) -> Any:
        return self._server

    @staticmethod
    def era(message: dict[str, Any]) -> str:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        stamped = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        return "modern" if stamped is not None and message.get("method") != "initialize" else "legacy"

    async def _connection(self, era: str) -> _Connection:
        label = era if self._split else "single"
        async with self._starting:
            connection = self._connections.get(label)
            if connection is not None:
                return connection
            await anyio.to_thread.run_sync(_import_sdk)
            if not self._app_ready.is_set():
                await self._app_ready.wait()
            if self._server is None:
                self._server = self._build()
            connection = _Connection(self, label)
            await connection.start(self.tg)
            self._connections[label] = connection
            if label == "legacy" and self.handshake is not None:
                request, initialized = self.handshake
                await connection.feed(json.dumps({**request, "id": REPLAY_ID}).encode())
                connection.initialized = True
                connection.version = request.get("params", {}).get("protocolVersion")
                if initialized:
                    await connection.feed(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
            return connection

    def started(self, era: str) -> _Connection | None:
        return self._connections.get(era if self._split else "single")

    async def forward(self, message: dict[str, Any], line: bytes) -> None:
        method = message.get("method")
        try:
            connection = self.owner_of(message)
            if connection is None:
                if method is None or method == "notifications/cancelled":
                    log.info("dropped a message no request of ours is waiting for: %.200r", line)
                    return
                connection = await self._connection(self.era(message))
            if method is not None and "id" in message:
                self.pending[message["id"]] = (connection, method, message.get("params"))
            if method is not None and method != "initialize" and self.era(message) == "modern":
                connection.initialized = True
                connection.version = message["params"]["_meta"].get(PROTOCOL_VERSION_META_KEY)
            await connection.feed(line)
            if method == "notifications/cancelled":
                # Its request gets no answer now (MCP: none is sent after a cancellation): its id
                # is free, and the end of input must not wait for it (found by testing from outside).
                self.pending.pop(cancelled_id(message), None)
        except BaseException:
            # The SDK refused it and the caller answers it (or the connection ends): at end of
            # input nothing must wait for an answer that is already given, nor its id stay taken.
            if method is not None and "id" in message:
                self.pending.pop(message["id"], None)
            raise

    def reserve(self, request_id: Any) -> None:
        """A request passed on for the SDK is unanswered from now on, though it may wait behind
        earlier lines before :meth:`feed` takes it (the front refuses its id meanwhile)."""
        self.pending.setdefault(request_id, None)  # type: ignore[arg-type] - filled in by feed

    def owner_of(self, message: dict[str, Any]) -> _Connection | None:
        """The connection a cancellation or a response belongs to."""
        if message.get("method") == "notifications/cancelled":
            held = self.pending.get(cancelled_id(message))
            return held[0] if held else None
        if "method" not in message:
            return self.started("legacy")
        return None

    async def answered(self, connection: _Connection, request_id: Any, message: Any) -> None:
        held = self.pending.pop(request_id, None)
        data = _dump(message)
        error = getattr(message, "error", None)
        if held is not None and held[1] == "initialize" and error is None:
            # Only an initialize the SDK accepted changes the connection: one it refused (a
            # version that is no string) must not be what later hints speak of.
            connection.initialized = True
            connection.version = (json.loads(data).get("result") or {}).get("protocolVersion")
        if error is not None and error.code == INVALID_PARAMS and not error.data and held is not None:
            _, method, params = held
            hint = describe_invalid_params(method, params, connection.version, connection.initialized)
            reply = json.loads(data)
            reply["error"]["data"] = hint
            data = encode(reply)
        observer = self.on_answer.pop(request_id, None)
        await self.send(data)
        if observer is not None and error is None:
            observer(data)

    @property
    def unanswered(self) -> bool:
        return bool(self.pending)

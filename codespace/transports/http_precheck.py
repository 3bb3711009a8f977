"""The HTTP transport's checks of a request before the SDK sees it: the SDK's own Host and
Origin checks made first (DNS rebinding), and the JSON-RPC refusals the stdio front gives
(:class:`JsonRpcPrecheck`), each answered as over stdio."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request, find_duplicated_routing_header
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request

from ..app import App
from ..surrogates import find_lone_surrogate
from .calls import answer_call
from .wire import (
    ID_EDGE_BYTES,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    BadMessage,
    id_at_edges,
    encode,
    parse,
    reused_id,
    stamp_server_info,
)


async def _respond(send: Any, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    """A whole response of ours, in place of the SDK's."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HostOriginGate:
    """ASGI middleware: the SDK's DNS-rebinding checks (Host, Origin) on every request,
    before any handling of ours; the SDK makes them only once a request reaches its
    transport, which answers we give ourselves would skip."""

    def __init__(self, app: Any, settings: TransportSecuritySettings) -> None:
        self.app = app
        self._security = TransportSecurityMiddleware(settings)
        hosts, origins = ", ".join(settings.allowed_hosts), ", ".join(settings.allowed_origins)
        self._explained = {
            421: f"Invalid Host header: this server answers only requests addressed to {hosts} "
                 "(DNS-rebinding protection); connect to one of those addresses",
            403: f"Invalid Origin header: a web page may call this server only from {origins} "
                 "(DNS-rebinding protection); call it from one of those origins or from a non-browser client",
        }

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            # is_post=False: the Content-Type rule is the SDK's own, and stays its to apply
            # (a POST to another path gets 404, not 400).
            # Host names are caseless (found by testing from outside: "Host: LocalHost:port" got 421);
            # the SDK, here and again in its transport, compares them as they are written.
            scope = {**scope, "headers": [(k, v.lower() if k.lower() in (b"host", b"origin") else v)
                                          for k, v in scope.get("headers", ())]}
            refusal = await self._security.validate_request(Request(scope), is_post=False)
            if refusal is not None:
                status = refusal.status_code
                await _respond(send, status, self._explained.get(status, bytes(refusal.body).decode()).encode(),
                               b"text/plain; charset=utf-8")
                return
        await self.app(scope, receive, send)


_ADMIT, _LEAVE_TO_SDK = "admit", "leave to the SDK"
DRAIN_BYTES = 64 << 20  # of a body past the cap, read and dropped before the 413 (the stdio line cap)

MISSING_SESSION_BODY = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32600,
    "message": "Bad Request: Missing session ID: a call over this protocol version belongs to a session; send "
               "the mcp-session-id header that the server returned from initialize (or initialize first)",
}}).encode()


class JsonRpcPrecheck:
    """ASGI middleware: a POSTed message the stdio front would refuse (nested too deep,
    an object as id, a batch, not JSON-RPC) gets the same JSON-RPC error with status 400,
    before the SDK sees it (it leaves an object id unanswered). A tool call whose
    arguments hold a lone surrogate, which the SDK's parser refuses as a bare parse error,
    gets the gateway's answer naming the argument, as over stdio."""

    def __init__(self, app: Any, limit: int, codespace: App, sessions: StreamableHTTPSessionManager,
                 security: TransportSecuritySettings, calls_running: set[tuple[str, str]] | None = None) -> None:
        """``calls_running``: (session, request id as text) of the tool calls whose handler runs
        (:func:`codespace.server.build_server` keeps it): a call goes on when its client leaves."""
        self.app = app
        self._limit = limit
        self._codespace = codespace
        self._sessions = sessions
        self._security = TransportSecurityMiddleware(security)
        # (session, request id as text) of requests not answered yet -> the id as sent
        self._unanswered: dict[tuple[str, str], Any] = {}
        self._calls_running = calls_running if calls_running is not None else set()

    async def _admission(self, scope: dict[str, Any], message: dict[str, Any]) -> str | bytes:
        """Whether the SDK would serve this call: ``_ADMIT``, ``_LEAVE_TO_SDK`` (it refuses
        it, and says why, before parsing the body), or the body of a 400 that says what
        is missing where the SDK's refusal would be a bare parse error."""
        request = Request(scope)
        has_json, has_sse = check_accept_headers(request)
        if await self._security.validate_request(request, is_post=True) is not None \
                or not has_json or not (has_sse or self._sessions.json_response):
            return _LEAVE_TO_SDK
        headers = Headers(scope=scope)
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # The sessionless era, routed by the header as the SDK's session manager does.
            if find_duplicated_routing_header(headers.items()) is not None \
                    or isinstance(classify_inbound_request(message, headers=dict(headers)), InboundLadderRejection):
                return _LEAVE_TO_SDK
            return _ADMIT
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            return MISSING_SESSION_BODY
        return _ADMIT if self._live_session(session_id, scope) else _LEAVE_TO_SDK

    def _live_session(self, session_id: str, scope: dict[str, Any]) -> bool:
        """Whether the SDK's session manager would hand this session's requests to its transport.

        The SDK keeps no public registry of sessions, so this reads its private
        ``_server_instances``; should that ever change shape, every session counts as
        unknown and the SDK answers these calls itself (with a parse error), which
        never serves a call in a session that does not exist."""
        sessions = getattr(self._sessions, "_server_instances", None)
        transport = sessions.get(session_id) if isinstance(sessions, Mapping) else None
        if transport is None or getattr(transport, "is_terminated", True):
            return False
        idle = getattr(transport, "idle_scope", None)
        if idle is not None and idle.cancel_called:  # timed out: the SDK answers 404
            return False
        # The SDK binds a session to scope["user"]; nothing here sets one, so a request
        # that carries one came some other way and is the SDK's to judge.
        return scope.get("user") is None

    async def _surrogate_call(self, message: dict[str, Any], scope: dict[str, Any], send: Any) -> bool:
        params = message.get("params")
        if message.get("method") != "tools/call" or not isinstance(params, dict) or "id" not in message:
            return False
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict) or find_lone_surrogate(arguments) is None:
            return False
        admission = await self._admission(scope, message)
        if admission is _LEAVE_TO_SDK:
            return False
        if isinstance(admission, bytes):
            await _respond(send, 400, admission)
            return True
        meta = params.get("_meta")
        modern = isinstance(meta, dict) and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS
        # Refused before any work; the answer is written here, not by the SDK, so it gets the SDK's stamp here.
        result = await answer_call(self._codespace, name, arguments, transport="http", client_name=None, modern=modern)
        if modern:
            stamp_server_info(result)
        await _respond(send, 200, encode({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            # Past what is worth reading, answered at once: a client that declared 100 GB and sent
            # nothing held a connection until its timeout.
            await self._too_large(send, receive, int(declared), b"", more=int(declared) <= DRAIN_BYTES)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client left before its body was whole: there is no one to answer,
                # and the SDK would log the ClientDisconnect with a traceback.
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self._limit or not message.get("more_body"):
                break
        body = b"".join(chunks)
        if size > self._limit:
            await self._too_large(send, receive, size, body, more=bool(message.get("more_body")))
            return
        key = None  # (session, id) of a request this POST carries, held until it is answered
        try:
            message = parse(body)
        except BadMessage as bad:
            if bad.reply:
                await _respond(send, 400, bad.reply)
                return
        else:
            key = self._request_key(message, scope)
            if key is not None and (key in self._unanswered or key in self._calls_running):
                await _respond(send, 400, reused_id(message["id"]))  # before any road that answers a call
                return
            if await self._surrogate_call(message, scope, send) or await self._bad_initialize(message, scope, send) \
                    or await self._no_room(message, scope, send) or await self._other_ids_cancel(message, scope, send):
                return
            send = _filling_invalid_params(send, message, scope)
        if key is not None:
            self._unanswered[key] = message["id"]
        try:
            await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)
        finally:
            self._unanswered.pop(key, None)

    async def _other_ids_cancel(self, message: Any, scope: dict[str, Any], send: Any) -> bool:
        """A cancel naming ``"6"`` while the request in flight is ``6`` (or the reverse): the SDK keys
        requests by the id's text and would cancel it (found by testing from outside); in JSON-RPC,
        and over stdio, they are two ids. Accepted, and dropped: it names no request of ours."""
        if not isinstance(message, dict) or message.get("method") != "notifications/cancelled" or "id" in message:
            return False
        params = message.get("params")
        named = params.get("requestId") if isinstance(params, dict) else None
        session = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if session is None or named is None:
            return False
        key = (session, str(named))
        if key not in self._unanswered or type(self._unanswered[key]) is type(named):
            return False
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return True

    @staticmethod
    def _request_key(message: Any, scope: dict[str, Any]) -> tuple[str, str] | None:
        """(session, id as text) of a request in a session: MCP forbids reusing an id there.
        Found by testing from outside: the SDK ran both, and the first caller's POST never got its
        answer (the second's stream took its place; the SDK keys them by the id's text, so 5 and
        "5" are one). Sessionless requests are each their own."""
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return None
        session = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        return None if session is None else (session, str(message["id"]))

    @staticmethod
    async def _bad_initialize(message: Any, scope: dict[str, Any], send: Any) -> bool:
        """An initialize the SDK would refuse, answered here: the SDK opens the session before it
        validates, and keeps it (found by testing from outside: 246 refused initializes held 246
        of the 256 places, and a real client then got 503). As a notification it would get the
        SDK's "Missing session ID" and a session id header."""
        if not isinstance(message, dict) or message.get("method") != "initialize" \
                or Headers(scope=scope).get(MCP_SESSION_ID_HEADER) is not None:
            return False
        if "id" not in message:
            await _respond(send, 400, encode({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "Invalid Request: initialize is a request: send it with an id, and the "
                "answer opens the session; nothing was opened"}}))
            return True
        from .bridge import params_problem

        params = message.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        hint = params_problem("initialize", params, asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else None)
        if hint is None:
            return False  # valid: the SDK opens the session
        await _respond(send, 400, encode({"jsonrpc": "2.0", "id": message["id"], "error": {
            "code": -32602, "message": "Invalid request parameters", "data": hint}}))
        return True

    async def _no_room(self, message: Any, scope: dict[str, Any], send: Any) -> bool:
        """An initialize that would open a session past the cap: the SDK's 503 says only "Too
        many open sessions"; this one says which limit and what frees a place."""
        cap = getattr(self._sessions, "max_sessions", None)
        sessions = getattr(self._sessions, "_server_instances", None)  # see _live_session
        if not isinstance(message, dict) or message.get("method") != "initialize" or cap is None \
                or not isinstance(sessions, Mapping) or len(sessions) < cap \
                or Headers(scope=scope).get(MCP_SESSION_ID_HEADER) is not None:
            return False
        await _respond(send, 503, encode({"jsonrpc": "2.0", "id": message.get("id"), "error": {
            "code": -32603, "message": (
                f"Too many open MCP sessions: {len(sessions)}, the most this server keeps "
                "($CODESPACE_HTTP_MAX_SESSIONS); nothing was opened. A session ends when its client closes it "
                "(an HTTP DELETE with its mcp-session-id, which the SDKs send on close) or after 30 minutes "
                "without a request. To proceed: reuse an open session, close unused ones, or ask the operator "
                "to raise the limit")}}))
        return True

    async def _too_large(self, send: Any, receive: Any, size: int, start: bytes, *, more: bool) -> None:
        """413 with a JSON-RPC error naming the limit (the SDK's is a bare "Request body too
        large"), the request's id when its first bytes show it. The rest of the body is read
        first (up to DRAIN_BYTES), unkept: closing a socket with unread data resets it, and
        the client then sees "connection reset" instead of the answer."""
        drained = size
        while more and drained <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunk = message.get("body", b"")
            start = start or chunk[:ID_EDGE_BYTES]
            drained += len(chunk)
            more = bool(message.get("more_body"))
        policy = self._codespace.workspace.limits.max_argument_bytes
        body = encode({"jsonrpc": "2.0", "id": id_at_edges(start[:ID_EDGE_BYTES], b""),
                       "error": {"code": -32600, "message": (
                           f"Invalid Request: the request body is {size} bytes or more, larger than the {self._limit} "
                           "this server reads; nothing was done. Send smaller arguments (the policy's "
                           f"limits.max_argument_bytes, {policy} bytes, bounds one call's arguments; write big "
                           "content in parts)")}})
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


_EMPTY_INVALID_PARAMS = b'"code":-32602,"message":"Invalid request parameters","data":""'


def _filling_invalid_params(send: Any, message: dict[str, Any], scope: dict[str, Any]) -> Any:
    """``send`` that gives the SDK's -32602 (empty ``data``) a ``data`` saying what was wrong,
    as over stdio."""
    method, params = message.get("method"), message.get("params")
    if not isinstance(method, str) or "id" not in message:
        return send
    headers = dict(scope.get("headers") or ())
    held: list[dict[str, Any]] = []

    async def filling(event: dict[str, Any]) -> None:
        if event["type"] == "http.response.start":
            held.append(event)
            return
        if event["type"] == "http.response.body" and _EMPTY_INVALID_PARAMS in event.get("body", b""):
            from .bridge import describe_invalid_params

            meta = params.get("_meta") if isinstance(params, dict) else None
            stamped = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
            version = stamped or headers.get(b"mcp-protocol-version", b"").decode("latin-1") or None
            initialized = stamped is not None or method == "initialize" or b"mcp-session-id" in headers
            hint = describe_invalid_params(method, params, version, initialized)
            filled = _EMPTY_INVALID_PARAMS[:-2] + json.dumps(hint).encode()
            event = {**event, "body": event["body"].replace(_EMPTY_INVALID_PARAMS, filled)}
            if held and not event.get("more_body"):
                held[0] = {**held[0], "headers": [
                    (k, str(len(event["body"])).encode() if k.lower() == b"content-length" else v)
                    for k, v in held[0].get("headers", [])]}
        while held:
            await send(held.pop(0))
        await send(event)

    return filling


def _replay(messages: list[dict[str, Any]], then: Any = None) -> Any:
    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive

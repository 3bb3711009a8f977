"""Streamable HTTP on loopback, behind a bearer token, with Host/Origin checks on.

The token is required on every request (a loopback port is reachable by every
local user and by any web page through DNS rebinding); it comes from
``--token-file`` or ``CODESPACE_HTTP_TOKEN``, or is generated once into a 0600
file in the state directory and reused across restarts.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from ..app import App
from ..server import build_server
from ..surrogates import find_lone_surrogate
from ..workspace import WorkspaceError
from .calls import answer_call
from .wire import MODERN_PROTOCOL_VERSIONS, PROTOCOL_VERSION_META_KEY, BadMessage, encode, parse, stamp_server_info

log = logging.getLogger(__name__)

TOKEN_FILE = "http-token"
ENV_TOKEN = "CODESPACE_HTTP_TOKEN"
MCP_PATH = "/mcp"


class HttpConfigError(WorkspaceError):
    """The HTTP transport cannot start as configured."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_or_create_token(state_dir: Path, token_file: Path | None, env: dict[str, str] | os._Environ[str]) -> tuple[str, Path | None]:
    """The bearer token, and the file it lives in (None when it came from the environment)."""
    if token_file is not None:
        token = token_file.read_text().strip()
        if len(token) < 16:
            raise HttpConfigError(f"token file {token_file} holds fewer than 16 characters; use a longer secret")
        return token, token_file
    if env.get(ENV_TOKEN):
        return env[ENV_TOKEN], None
    path = state_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        token = path.read_text().strip()
        if token:
            return token, path
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, path


UNAUTHORIZED_BODY = json.dumps({
    "error": "unauthorized",
    # Says where the operator finds the token, never the path itself: an unauthenticated
    # caller learns nothing about this machine.
    "message": "missing or wrong bearer token; send 'Authorization: Bearer <token>' with the token this server "
               "announced on its stderr at start (from --token-file, $CODESPACE_HTTP_TOKEN or its state directory)",
}).encode()


def _bearer(header: bytes) -> bytes | None:
    """The credentials of an ``Authorization: Bearer ...`` header; the scheme is
    case-insensitive (RFC 9110 section 11.1), the token is not."""
    scheme, _, credentials = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip(b" ")


class BearerTokenGate:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            supplied = _bearer(dict(scope.get("headers") or ()).get(b"authorization", b""))
            if supplied is None or not hmac.compare_digest(supplied, self._expected):
                await send({
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="codespace"'),
                        (b"content-length", str(len(UNAUTHORIZED_BODY)).encode()),
                    ],
                })
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self.app(scope, receive, send)


class JsonRpcPrecheck:
    """ASGI middleware: a POSTed message the stdio front would refuse (nested too deep,
    an object as id, a batch, not JSON-RPC) gets the same JSON-RPC error with status 400,
    before the SDK sees it (it leaves an object id unanswered). A tool call whose
    arguments hold a lone surrogate, which the SDK's parser refuses as a bare parse error,
    gets the gateway's answer naming the argument, as over stdio."""

    def __init__(self, app: Any, limit: int, codespace: App) -> None:
        self.app = app
        self._limit = limit
        self._codespace = codespace

    async def _surrogate_call(self, message: dict[str, Any], send: Any) -> bool:
        params = message.get("params")
        if message.get("method") != "tools/call" or not isinstance(params, dict) or "id" not in message:
            return False
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict) or find_lone_surrogate(arguments) is None:
            return False
        meta = params.get("_meta")
        modern = isinstance(meta, dict) and meta.get(PROTOCOL_VERSION_META_KEY) in MODERN_PROTOCOL_VERSIONS
        # Refused before any work; the answer is written here, not by the SDK, so it gets the SDK's stamp here.
        result = await answer_call(self._codespace, name, arguments, transport="http", client_name=None, modern=modern)
        if modern:
            stamp_server_info(result)
        body = encode({"jsonrpc": "2.0", "id": message["id"], "result": result})
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self._limit or not message.get("more_body"):
                break
        body = b"".join(chunks)
        if size <= self._limit:
            try:
                message = parse(body)
            except BadMessage as bad:
                if bad.reply:
                    await send({"type": "http.response.start", "status": 400, "headers": [
                        (b"content-type", b"application/json"), (b"content-length", str(len(bad.reply)).encode())]})
                    await send({"type": "http.response.body", "body": bad.reply})
                    return
            else:
                if await self._surrogate_call(message, send):
                    return
                send = _filling_invalid_params(send, message, scope)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": size > self._limit}],
                                      receive), send)


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


def bind(host: str, port: int) -> socket.socket:
    if not is_loopback(host):
        raise HttpConfigError(
            f"refusing to listen on {host}: the HTTP transport serves loopback only (127.0.0.1, ::1, localhost); "
            "put an authenticating reverse proxy in front for remote access"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def asgi_app(app: App, port: int, token: str) -> Any:
    server = build_server(app, transport="http")
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    limit = app.workspace.limits.max_argument_bytes
    starlette_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=security,
        # Leave room for the JSON-RPC envelope, so an oversized argument reaches the
        # gateway and gets a refusal that names the rule instead of a bare 413.
        max_request_body_size=limit * 2 + 65536,
    )
    return BearerTokenGate(JsonRpcPrecheck(starlette_app, limit * 2 + 65536, app), token)


def serve_http(workspace: str | None, policy: str | None, state_dir: str | None, *, host: str, port: int,
               token_file: str | None) -> int:
    """``codespace serve --transport http``: build the App, settle the token, listen until stopped."""
    import anyio

    app = App.build(workspace, policy=policy, state_dir=state_dir)
    token, token_path = load_or_create_token(
        app.workspace.ensure_state_dir(), Path(token_file) if token_file else None, os.environ
    )
    if token_path is not None:  # an operator's --token-file may lie where the agent could read it
        app.workspace.hide(token_path, "HTTP bearer token file")
    where = f"from {token_path}" if token_path else "from $CODESPACE_HTTP_TOKEN"
    sock = bind(host, port)
    anyio.run(_serve_on, app, sock, token, where)
    return 0


async def _serve_on(app: App, sock: socket.socket, token: str, where: str) -> None:
    import uvicorn

    port = sock.getsockname()[1]
    config = uvicorn.Config(
        asgi_app(app, port, token), log_level="warning", lifespan="on", access_log=False, ws="none"
    )
    host = sock.getsockname()[0]
    shown = f"[{host}]" if ":" in host else host
    log.warning("CodeSpace listening on http://%s:%d%s (bearer token %s)", shown, port, MCP_PATH, where)
    await uvicorn.Server(config).serve(sockets=[sock])

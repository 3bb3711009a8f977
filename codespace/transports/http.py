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
from ..workspace import WorkspaceError
from .http_guard import (
    DEFAULT_MAX_SESSIONS,
    LISTEN_QUEUE,
    SESSION_IDLE_S,
    ConnectionLimits,
    GuardedServer,
    guarded_protocol,
    limits_from_env,
    quiet_accept_errors,
)
from .http_precheck import HostOriginGate, JsonRpcPrecheck

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


# The body of a refused request is read (and dropped) up to this size before the refusal is
# sent: closing a connection while its body is still arriving makes the kernel reset it, and
# the client would see "connection reset" instead of the 401 that says what to send. Beyond
# it the connection is closed regardless: no client that merely lacks its token sends more.
REFUSED_BODY_READ = 1 << 20


async def _read_body(receive: Any, limit: int) -> None:
    size = 0
    while size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client left
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            return


class BearerTokenGate:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            supplied = _bearer(dict(scope.get("headers") or ()).get(b"authorization", b""))
            if supplied is None or not hmac.compare_digest(supplied, self._expected):
                declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
                if not (declared.isdigit() and int(declared) > REFUSED_BODY_READ):  # nor wait for one never sent
                    await _read_body(receive, REFUSED_BODY_READ)
                await send({
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="codespace"'),
                        (b"content-length", str(len(UNAUTHORIZED_BODY)).encode()),
                        # One refusal per connection: requests pipelined behind it without a token
                        # (thousands, their answers never read) kept connections busy and the cap full.
                        (b"connection", b"close"),
                    ],
                })
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self.app(scope, receive, send)


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
    sock.listen(LISTEN_QUEUE)
    sock.set_inheritable(False)
    return sock


def asgi_app(app: App, port: int, token: str, max_sessions: int = DEFAULT_MAX_SESSIONS) -> Any:
    calls_running: set[tuple[str, str]] = set()
    server = build_server(app, transport="http", calls_running=calls_running)
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
        max_sessions=max_sessions,
        session_idle_timeout=SESSION_IDLE_S,
    )
    precheck = JsonRpcPrecheck(starlette_app, limit * 2 + 65536, app, server.session_manager, security, calls_running)
    return BearerTokenGate(HostOriginGate(precheck, security), token)


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
    try:
        limits = limits_from_env(os.environ)
    except ValueError as bad:
        raise HttpConfigError(str(bad)) from None
    sock = bind(host, port)
    anyio.run(_serve_on, app, sock, token, where, limits)
    return 0


async def _serve_on(app: App, sock: socket.socket, token: str, where: str, limits: ConnectionLimits) -> None:
    import asyncio

    import uvicorn

    port = sock.getsockname()[1]
    config = uvicorn.Config(
        asgi_app(app, port, token, limits.max_sessions), log_level="warning", lifespan="on", access_log=False, ws="none",
        http=guarded_protocol(limits), backlog=limits.accept_batch,
    )
    quiet_accept_errors(asyncio.get_running_loop())
    host = sock.getsockname()[0]
    shown = f"[{host}]" if ":" in host else host
    log.warning("CodeSpace listening on http://%s:%d%s (bearer token %s)", shown, port, MCP_PATH, where)
    await GuardedServer(config).serve(sockets=[sock])

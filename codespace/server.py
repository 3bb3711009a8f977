"""The MCP face of an App: tool schemas out, tool calls into the gateway (through
:mod:`.transports.calls`, the one road every transport's calls take).

Built on the low-level ``mcp.server.Server``: measured side by side (see
benchmarks/README.md) it answers a call faster than ``MCPServer``, whose
signature introspection and per-call argument model we do not need because the
gateway validates with the tools' own pydantic models.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

from . import __version__
from .app import App
from .transports.calls import answer_call
from .transports.wire import INSTRUCTIONS, MODERN_PROTOCOL_VERSIONS, SERVER_NAME, SERVER_TITLE

log = logging.getLogger(__name__)


def _client_name(ctx: Any) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None)


def _http_call_key(ctx: Any) -> tuple[str, str] | None:
    """(session id, request id as text) of a call over HTTP in a session, else None."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    return None if session is None or ctx.request_id is None else (session, str(ctx.request_id))


def build_server(app: App, *, transport: str = "memory", ready: anyio.Event | None = None,
                 run_app: bool = True, calls_running: set[tuple[str, str]] | None = None) -> Server[App]:
    """``ready`` is set once the App runs. With ``run_app`` False the caller runs the App
    (the stdio front, which starts the SDK only when a request needs it). ``calls_running``
    (HTTP): where each tool call of a session is held, as (session id, request id as text),
    while its handler runs, which may be after its client has left."""
    active = not run_app

    @asynccontextmanager
    async def lifespan(_: Server[App]) -> AsyncIterator[App]:
        # stdio and HTTP enter the lifespan once; in-process legacy connections enter it
        # per connection, and a nested connection shares the App its first one runs.
        nonlocal active
        if active:  # already running (or run by the caller)
            yield app
            return
        active = True
        try:
            async with app.running():
                if ready is not None:
                    ready.set()
                yield app
        finally:
            active = False

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=app.registry.mcp_tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> dict[str, Any]:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(done, total, message)

        key = _http_call_key(ctx) if calls_running is not None else None
        if key is not None:
            calls_running.add(key)  # type: ignore[union-attr]
        try:
            # The SDK validates the result against its model and stamps the envelope.
            return await answer_call(app, params.name, params.arguments, transport=transport,
                                     client_name=_client_name(ctx),
                                     modern=ctx.protocol_version in MODERN_PROTOCOL_VERSIONS, progress=progress)
        finally:
            if key is not None:
                calls_running.discard(key)  # type: ignore[union-attr]

    server: Server[App] = Server(
        SERVER_NAME,
        version=__version__,
        title=SERVER_TITLE,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    if not os.environ.get("CODESPACE_OTEL"):
        # The default OpenTelemetry middleware is a no-op without an exporter but
        # still costs ~0.1 ms per call; CODESPACE_OTEL=1 keeps it.
        server.middleware = []
    return server

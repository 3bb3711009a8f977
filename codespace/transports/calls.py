"""Where every road's ``tools/call`` meets the gateway and becomes an MCP result.

A call reaches here from the stdio fast path (:mod:`.direct`), from the SDK's handler
(:mod:`codespace.server`: HTTP, in-process sessions, and what the stdio front passes
to the SDK) and from HTTP's early answer to arguments the SDK cannot parse
(:mod:`.http`). Having one place means a call is answered the same whichever way it
came in; tests/test_every_road_answers_the_same_bytes.py holds the roads to it.

It is on the stdio server's first call, so it imports nothing heavier than :mod:`.wire`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..app import App
    from ..outcome import Outcome

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


def client_label(transport: str, client_name: str | None) -> str:
    """The caller as operation records and logs name it: the road, then the client's own name."""
    return f"{transport}:{client_name}" if client_name else transport


def tool_result(outcome: Outcome, *, modern: bool) -> dict[str, Any]:
    """``outcome`` as a ``tools/call`` result, what a handler gives the SDK.

    Keys are in the order the SDK's result model writes them, so a road that writes
    this itself (after :func:`.wire.stamp_server_info` on a modern answer) sends the
    SDK's bytes. An error's machine-readable form travels in ``_meta``: errors carry no
    ``structuredContent`` (see :class:`codespace.outcome.Outcome`)."""
    result: dict[str, Any] = {}
    meta = outcome.meta
    if meta is not None:
        result["_meta"] = meta
    result["content"] = [{"text": outcome.text, "type": "text"}]
    result["isError"] = outcome.is_error
    if modern:  # the 2026-07-28 era requires it on every result
        result["resultType"] = "complete"
    if outcome.structured is not None:
        result["structuredContent"] = outcome.structured
    return result


async def answer_call(app: App, name: str, arguments: dict[str, Any] | None, *, transport: str,
                      client_name: str | None, modern: bool, progress: Progress | None = None) -> dict[str, Any]:
    """Run one tool call through the gateway; the result as :func:`tool_result` shapes it."""
    outcome = await app.gateway.call(name, arguments, client=client_label(transport, client_name), progress=progress)
    return tool_result(outcome, modern=modern)

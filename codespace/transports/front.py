"""What the stdio server answers itself, before and without the SDK.

An agent's client spawns the server and waits for ``initialize`` and ``tools/list``
before its first model request (Codex does not wait unless told to, and then runs
without the tools). The front answers both without importing the SDK or building
the App: ``initialize`` from constants, ``tools/list`` from the copy the SDK answered
at an earlier start (:mod:`.listing`). Tool calls go to :mod:`.direct`, which waits
for the App. Anything else, and every shape the front does not recognise as plain,
is passed to the SDK (:mod:`.bridge`); tests compare both paths' bytes.

A line is parsed once, here; one that cannot be served gets its JSON-RPC error and
the next line is read (:func:`.wire.parse`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .wire import INSTRUCTIONS, REPLAY_ID, BadMessage, negotiate, parse, reserved_id, reused_id, server_info

if TYPE_CHECKING:
    from .bridge import SdkBridge
    from .direct import DirectToolCalls
    from .listing import ListingCache

log = logging.getLogger(__name__)

Write = Callable[[bytes], None]  # schedules a line to be written, in order


def _dumps(message: dict[str, Any]) -> bytes:
    # The SDK writes compact JSON with non-ASCII as is; so does this (and without loading pydantic).
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _plain_initialize(params: Any) -> bool:
    if not isinstance(params, dict) or set(params) - {"protocolVersion", "capabilities", "clientInfo", "_meta"}:
        return False
    info = params.get("clientInfo")
    return (isinstance(params.get("protocolVersion"), str) and isinstance(params.get("capabilities"), dict)
            and isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str)
            and (params.get("_meta") is None or isinstance(params.get("_meta"), dict)))


def opening_kind(message: dict[str, Any]) -> str | None:
    """Which of the messages that open a classic connection ``message`` plainly is, if any:
    ``initialize``, ``initialized`` (the notification), ``ping`` or ``tools/list``."""
    method = message.get("method")
    params = message.get("params")
    if method == "initialize" and "id" in message and _plain_initialize(params):
        return "initialize"
    if method == "notifications/initialized":
        return "initialized"
    if method in ("ping", "tools/list") and "id" in message and params in (None, {}):
        return method
    return None


def initialize_reply(message: dict[str, Any]) -> tuple[bytes, str]:
    """The answer to a plain ``initialize`` and the version it negotiates."""
    version = negotiate(message["params"]["protocolVersion"])
    return _dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
        "capabilities": {"tools": {"listChanged": False}}, "instructions": INSTRUCTIONS,
        "protocolVersion": version, "serverInfo": server_info(),
    }}), version


def ping_reply(message: dict[str, Any]) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}})


def listing_reply(request_id: Any, result: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + _dumps(request_id) + b',"result":' + result + b"}"


def _enveloped(params: Any) -> bool:
    return isinstance(params, dict) and isinstance(params.get("_meta"), dict) \
        and "io.modelcontextprotocol/protocolVersion" in params["_meta"]


class Front:
    def __init__(self, direct: DirectToolCalls | None, bridge: SdkBridge, listing: ListingCache | None,
                 kept: tuple[bytes, list[str]] | None = None) -> None:
        """``listing``: where listings are kept (None: not kept); ``kept``: the one it held for
        this start (the result's bytes and the tool names)."""
        self.direct = direct  # None: every line goes to the SDK (CODESPACE_DIRECT_CALLS=0, the reference path)
        self.bridge = bridge
        self.listing = listing
        self._cached = kept if direct is not None else None
        self.negotiated: str | None = None
        self.served_names: list[str] | None = self._cached[1] if self._cached else None

    def take(self, line: bytes, write: Write) -> dict[str, Any] | None:
        """Answer ``line`` now (None) or return the parsed message for the SDK."""
        try:
            message = parse(line)
        except BadMessage as bad:
            if bad.reply:
                write(bad.reply)
            else:
                log.info("dropped a response to no request of ours: %.200r", line)
            return None
        request = "method" in message and "id" in message
        if request and message["id"] == REPLAY_ID:
            write(reserved_id(message["id"]))  # its answer would be taken for the replay's
            return None
        if request and self._unanswered(message["id"]):
            # Found by testing from outside: both ran, and both answers carried the one id. MCP
            # forbids reusing an id within a session; a retry of a call still running is the
            # likely cause, and running it twice is what the operation store exists to prevent.
            write(reused_id(message["id"]))
            return None
        passed = self._route(message, write)
        if passed is not None and request:
            self.bridge.reserve(message["id"])  # unanswered from now on, though it waits behind earlier lines
        return passed

    def _unanswered(self, request_id: Any) -> bool:
        return request_id in self.bridge.pending or (self.direct is not None and request_id in self.direct.taken)

    def _route(self, message: dict[str, Any], write: Write) -> dict[str, Any] | None:
        if self.direct is None:
            return message
        method = message.get("method")
        params = message.get("params")
        kind = opening_kind(message)
        if kind == "initialize":
            return self._initialize(message, write)
        if kind == "initialized":
            if self.bridge.handshake is not None:
                self.bridge.handshake = (self.bridge.handshake[0], True)
                self.direct.handshake_done(self.negotiated, message)
            return message if self.bridge.started("legacy") else None
        if _enveloped(params):
            if method == "tools/call" and self.direct.intercept(message, write):
                return None
            return message
        if kind == "ping":
            write(ping_reply(message))
            return None
        if kind == "tools/list" and self.negotiated is not None:
            return self._list(message, write)
        if method in ("tools/call", "notifications/cancelled") and self.direct.intercept(message, write):
            return None
        return message

    def _initialize(self, message: dict[str, Any], write: Write) -> None:
        reply, version = initialize_reply(message)
        self.negotiated = version
        self.direct.initialize(message["params"], version)
        self.bridge.handshake = (dict(message), False)
        write(reply)
        return None

    def _list(self, message: dict[str, Any], write: Write) -> None:
        request_id = message["id"]
        if self._cached is not None:
            write(listing_reply(request_id, self._cached[0]))
            return None
        # No listing kept: built once the tools are loaded, without the SDK's server (listing.build_result).
        self.direct.list_tools(request_id, self.negotiated, self.listed)
        return None

    def listed(self, result: bytes) -> None:
        """A listing was built and served: kept for the next start, and served from now on."""
        if self.listing is not None:
            self.listing.save(result)
        self._cached = (result, [t["name"] for t in json.loads(result)["tools"]])
        self.served_names = self._cached[1]

    def check_listing(self, registry_names: list[str]) -> None:
        """Once the App is built: did the cached listing name the registry's tools?"""
        if self.listing is not None and self.served_names is not None:
            self.listing.check(self.served_names, registry_names)

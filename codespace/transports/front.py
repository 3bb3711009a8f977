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

from .wire import INSTRUCTIONS, BadMessage, negotiate, parse, server_info

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


def _enveloped(params: Any) -> bool:
    return isinstance(params, dict) and isinstance(params.get("_meta"), dict) \
        and "io.modelcontextprotocol/protocolVersion" in params["_meta"]


class Front:
    def __init__(self, direct: DirectToolCalls | None, bridge: SdkBridge, listing: ListingCache | None) -> None:
        self.direct = direct  # None: every line goes to the SDK (CODESPACE_DIRECT_CALLS=0, the reference path)
        self.bridge = bridge
        self.listing = listing
        self._cached = listing.load() if (listing is not None and direct is not None) else None
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
        if self.direct is None:
            return message
        method = message.get("method")
        params = message.get("params")
        if method == "initialize" and "id" in message and _plain_initialize(params):
            return self._initialize(message, write)
        if method == "notifications/initialized":
            if self.bridge.handshake is not None:
                self.bridge.handshake = (self.bridge.handshake[0], True)
                self.direct.handshake_done(self.negotiated, message)
            return message if self.bridge.started("legacy") else None
        if _enveloped(params):
            if method == "tools/call" and self.direct.intercept(message, write):
                return None
            return message
        if method == "ping" and "id" in message and params in (None, {}):
            write(_dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}))
            return None
        if method == "tools/list" and "id" in message and params in (None, {}) and self.negotiated is not None:
            return self._list(message, write)
        if method in ("tools/call", "notifications/cancelled") and self.direct.intercept(message, write):
            return None
        return message

    def _initialize(self, message: dict[str, Any], write: Write) -> None:
        params = message["params"]
        version = negotiate(params["protocolVersion"])
        self.negotiated = version
        self.direct.initialize(params, version)
        self.bridge.handshake = ({**message, "params": params}, False)
        write(_dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
            "capabilities": {"tools": {"listChanged": False}}, "instructions": INSTRUCTIONS,
            "protocolVersion": version, "serverInfo": server_info(),
        }}))
        return None

    def _list(self, message: dict[str, Any], write: Write) -> None:
        request_id = message["id"]
        if self._cached is not None:
            write(b'{"jsonrpc":"2.0","id":' + _dumps(request_id) + b',"result":' + self._cached[0] + b"}")
            return None
        # No listing kept: built once the App is, without the SDK's server (listing.build_result).
        self.direct.list_tools(request_id, self.negotiated, self._keep)
        return None

    def listing_wanted(self) -> bool:
        """No kept listing: the first ``tools/list`` waits for one to be written."""
        return self._cached is None

    def _keep(self, result: bytes) -> None:
        if self.listing is not None:
            self.listing.save(result)
        self._cached = (result, [t["name"] for t in json.loads(result)["tools"]])
        self.served_names = self._cached[1]

    def check_listing(self, registry_names: list[str]) -> None:
        """Once the App is built: did the cached listing name the registry's tools?"""
        if self.listing is not None and self.served_names is not None:
            self.listing.check(self.served_names, registry_names)

"""JSON-RPC framing shared by the stdio front and the SDK bridge, without the SDK.

Everything here is on the server-ready path, so it imports nothing heavier than
``json``: the protocol constants the SDK also defines are restated (a test checks
they agree with ``mcp_types``), and the pydantic-core encoder is loaded on first
use, by which time the App has imported pydantic anyway.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import __version__
from ..surrogates import encodable

HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_PROTOCOL_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"

SERVER_NAME = "codespace"
SERVER_TITLE = "CodeSpace"
INSTRUCTIONS = (
    "CodeSpace executes in a governed workspace. Call workspace_info first: it shows the root (relative paths "
    "resolve against it), what is readable or writable, command rules and limits. Side-effecting tools accept "
    "operation_id: retrying with the same id returns the stored result instead of running twice. Refusals name "
    "the policy rule that applied."
)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

MAX_DEPTH = 64
"""How deeply a message may nest. No MCP message we serve needs more than a dozen levels;
deeper ones are refused before anything recursive (validation, the store's JSON) sees them."""

REPLAY_ID = "codespace-front:initialize-replay"
"""The id of the initialize the stdio bridge replays to the SDK: a client's request with it is refused."""


def server_info() -> dict[str, Any]:
    return {"name": SERVER_NAME, "title": SERVER_TITLE, "version": __version__}


def stamp_server_info(result: dict[str, Any]) -> dict[str, Any]:
    """A 2026-era result with the ``serverInfo`` stamp the SDK puts on it (in ``_meta``,
    which goes last when the result had none), for answers written without the SDK."""
    result["_meta"] = {**result.get("_meta", {}), SERVER_INFO_META_KEY: server_info()}
    return result


def negotiate(requested: Any) -> str:
    """The version an ``initialize`` answer settles on, as the SDK picks it."""
    return requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION


def encode(message: dict[str, Any]) -> bytes:
    """Compact JSON, as the SDK writes it. pydantic-core's encoder is about four times faster
    than json.dumps for a listing's answer and writes the same bytes; a lone surrogate (which
    UTF-8 cannot carry) falls back to \\u escapes."""
    from pydantic_core import PydanticSerializationError, to_json

    try:
        return to_json(message)
    except PydanticSerializationError:
        return json.dumps(message, separators=(",", ":")).encode("ascii")


def error_reply(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error},
                      separators=(",", ":")).encode("ascii")


def reused_id(request_id: Any) -> bytes:
    """The answer to a request whose id is that of one of the same session not answered yet:
    MCP forbids reusing an id there, and a retry of a call still running would run it twice."""
    return error_reply(request_id, INVALID_REQUEST, (
        f"Invalid Request: id {json.dumps(request_id)[:80]} belongs to a request that has not been answered yet; "
        "this one was not run. Give every request its own id (to wait for the first, wait for its answer; to stop "
        "it, send notifications/cancelled)"))


def reserved_id(request_id: Any) -> bytes:
    return error_reply(request_id, INVALID_REQUEST, (
        f"Invalid Request: id {json.dumps(request_id)[:80]} is one the server uses for a request of its own; this "
        "one was not run. Use another id"))


class BadMessage(Exception):
    """A line that gets a JSON-RPC error instead of being served."""

    def __init__(self, reply: bytes) -> None:
        super().__init__(reply)
        self.reply = reply


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values() if isinstance(child, (dict, list)))
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
    return False


MAX_LINE_BYTES = 64 << 20  # one message; the policy's max_argument_bytes (4 MiB by default) refuses far less
TOO_LONG = b"\0line too long"  # stands for a line dropped unread (no JSON text starts with NUL)
ID_EDGE_BYTES = 256  # of a dropped line, kept at each end to find its id in


class DroppedLine(bytes):
    """:data:`TOO_LONG` for a line dropped unread, with its first and last bytes."""

    head: bytes
    tail: bytes

    def __new__(cls, value: bytes, head: bytes, tail: bytes) -> DroppedLine:
        line = super().__new__(cls, value)
        line.head, line.tail = head, tail
        return line


# Where a request's id stands in the JSON the SDKs write: first, after "jsonrpc" (Python's), or
# last (TypeScript's ``{...request, jsonrpc, id}``). Only a top-level id matches: one that opens
# the object, or one that closes it with nothing after (a nested one is followed by more '}').
_ID = rb'(-?\d{1,19}|"(?:[^"\\]|\\.){0,200}")'
_HEAD_ID = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID + rb'\s*,')
_TAIL_ID = re.compile(rb',\s*"id"\s*:\s*' + _ID + rb'\s*\}\s*$')


def id_at_edges(head: bytes, tail: bytes) -> str | int | None:
    """The id of a request dropped unread, when its first or last bytes show it (else None):
    without it the answer cannot reach the caller (an SDK waits for its id, then times out)."""
    found = _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if valid_id(value) else None


def valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings or numbers (MCP: integers); bool is not a number here."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def cancelled_id(message: dict[str, Any]) -> str | int | None:
    """The request a ``notifications/cancelled`` names, None when it names none validly (an
    array or object there must not end in an error: a notification gets no answer)."""
    params = message.get("params")
    request_id = params.get("requestId") if isinstance(params, dict) else None
    return request_id if valid_id(request_id) else None


class NotJson(ValueError):
    """A token Python's parser takes and JSON does not."""


def _no_constant(name: str) -> float:
    # Found by testing from outside: NaN and Infinity were taken as numbers (Python's extension).
    raise NotJson(f"{name} is not JSON (numbers are finite); send a number or null")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parse(line: bytes) -> dict[str, Any]:
    """One JSON-RPC message, or :class:`BadMessage` carrying the error reply to send.

    Deep nesting is refused here, never passed on: Python's and pydantic's parsers and
    validators recurse, and a RecursionError escaping a transport ends the server."""
    if line == TOO_LONG:
        request_id = id_at_edges(getattr(line, "head", b""), getattr(line, "tail", b""))
        raise BadMessage(error_reply(request_id, INVALID_REQUEST, f"Invalid Request: the line is longer than "
                                     f"{MAX_LINE_BYTES >> 20} MiB and was dropped unread; send smaller arguments (the "
                                     "policy's limits.max_argument_bytes bounds one call's arguments)"))
    try:
        message = _DECODER.decode(line.decode("utf-8", "surrogatepass"))  # as json.loads takes bytes
    except RecursionError:
        raise BadMessage(error_reply(None, INVALID_REQUEST, f"Invalid Request: the message nests deeper than "
                                     f"{MAX_DEPTH} levels; flatten the arguments")) from None
    except ValueError as exc:
        # The request's id, when its first or last bytes show it: a client waits for an answer to
        # its id (found by testing from outside: one whose line held bytes that are not UTF-8 hung).
        request_id = id_at_edges(line[:ID_EDGE_BYTES], line[-ID_EDGE_BYTES:])
        if isinstance(exc, UnicodeDecodeError):
            why = (f"the line is not UTF-8 (byte 0x{line[exc.start]:02x} at offset {exc.start}), as JSON text must be; "
                   "send text as UTF-8, and bytes that are not text encoded (base64)")
        elif isinstance(exc, NotJson):
            why = str(exc)
        elif "integer string conversion" in str(exc):
            # Found by testing from outside: a valid integer of 5,000 digits was said not to be JSON.
            why = "a number in it has more digits than this server reads (4,300); send ids and numbers of ordinary size"
        else:
            why = "the line is not valid JSON"
        raise BadMessage(error_reply(request_id, PARSE_ERROR, f"Parse error: {why}")) from None
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth_exceeds(message, MAX_DEPTH):
        request_id = message.get("id") if isinstance(message, dict) and valid_id(message.get("id")) else None
        raise BadMessage(error_reply(request_id, INVALID_REQUEST, f"Invalid Request: the message nests deeper "
                                     f"than {MAX_DEPTH} levels; flatten the arguments"))
    if isinstance(message, list):
        raise BadMessage(error_reply(None, INVALID_REQUEST, "Invalid Request: batches are not part of MCP; "
                                     "send one JSON-RPC message per line"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise BadMessage(error_reply(None, INVALID_REQUEST,
                                     "Invalid Request: not a JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")"))
    if "id" in message and not valid_id(message["id"]) and message["id"] is not None:
        if "method" in message:
            raise BadMessage(error_reply(None, INVALID_REQUEST, "Invalid Request: \"id\" must be a string or an "
                                         f"integer, not {type(message['id']).__name__}"))
        raise BadMessage(b"")  # a response with an id we never sent: nothing to answer
    if isinstance(message.get("id"), str) and not encodable(message["id"]):
        if "method" in message:  # no answer could carry it: UTF-8 has no lone surrogate
            raise BadMessage(error_reply(None, INVALID_REQUEST, "Invalid Request: \"id\" holds a lone surrogate "
                                         "(a \\ud800-\\udfff escape without its pair), which no UTF-8 reply can carry; "
                                         "use an integer id or one of Unicode text"))
        raise BadMessage(b"")
    if "method" not in message and "result" not in message and "error" not in message:
        # Found by testing from outside: {"jsonrpc": "2.0", "id": 5} went unanswered.
        raise BadMessage(error_reply(message["id"] if valid_id(message.get("id")) else None, INVALID_REQUEST,
                                     "Invalid Request: a message needs a \"method\" (a request or a notification) "
                                     "or a \"result\" or \"error\" (a response)"))
    method = message.get("method")
    if "method" in message and not isinstance(method, str):
        request_id = message.get("id") if valid_id(message.get("id")) else None
        raise BadMessage(error_reply(request_id, INVALID_REQUEST, "Invalid Request: \"method\" must be a string"))
    # Found by testing from outside: each of these went on to the SDK, which answered a null id
    # with a result, left a notification with an id unanswered, or named none of the problem.
    if method is not None and "id" in message:
        request_id = message["id"]
        if request_id is None:
            raise BadMessage(error_reply(None, INVALID_REQUEST, "Invalid Request: \"id\" is null, which MCP does not "
                                         "allow; send a string or an integer id (or no \"id\" at all for a notification)"))
        if method.startswith("notifications/"):
            raise BadMessage(error_reply(request_id, INVALID_REQUEST, f"Invalid Request: {_shown(method)} is a "
                                         "notification, which carries no \"id\" and gets no answer; send it without one"))
        params = message.get("params")
        if "params" in message and not isinstance(params, dict):
            raise BadMessage(error_reply(request_id, INVALID_PARAMS, f"Invalid params: \"params\" of {_shown(method)} "
                                         f"must be an object (MCP passes parameters by name), not {_json_type(params)}"))
    return message


def _shown(text: str, at_most: int = 80) -> str:
    """A client's string quoted in a message, cut short (a 100,000-character name echoed in full
    made a 200 KB error)."""
    return repr(text if len(text) <= at_most else text[:at_most] + "...")


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)

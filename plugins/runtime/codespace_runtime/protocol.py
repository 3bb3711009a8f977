"""Protocol 5's messages: CodeSpace's own, separate from the sandbox helper's handshake 1.

The worker speaks first with a :class:`Greeting`. Every frame after it is JSON-RPC-shaped: a
:class:`Request` (``id``, ``method``, ``params``), a :class:`Response` (``id`` and ``result`` or
``error``) or a :class:`Notification` (no ``id``). The first request must be ``hello``
(:class:`Hello`, answered with :class:`Welcome`); before it the worker answers only ``status``,
with versions and liveness.

The proof in ``hello`` is HMAC-SHA256 keyed with the token (the bytes of the 0600 token file,
surrounding white space removed) over the greeting's nonce (its bytes, not its hex), in hex.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from codespace.contract import Strict
from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

PROTOCOL = 5
WORKER_VERSION = "0.1.2"
"""codespace-runtime's version (a test holds it to the package metadata)."""
NONCE_BYTES = 32

# Error codes (Error.code). The message says what was wrong and what to do; the code is for programs.
FRAME = "frame"                       # the frame could not be read (oversized, not JSON, ...)
BAD_REQUEST = "bad_request"           # a frame that is not a request of protocol 5
PROTOCOL_MISMATCH = "protocol_mismatch"
BAD_PROOF = "bad_proof"
NOT_AUTHENTICATED = "not_authenticated"
UNKNOWN_METHOD = "unknown_method"
BAD_PARAMS = "bad_params"
BUSY = "busy"                         # too many requests in flight on this connection
CANCELLED = "cancelled"
SHUTTING_DOWN = "shutting_down"
FAILED = "failed"                     # the handler raised something no mapping knew


class Greeting(Strict):
    """The worker's first frame."""

    protocols: list[StrictInt]
    nonce: StrictStr = Field(pattern=r"^[0-9a-f]{64}$")
    worker: StrictStr
    """The worker's distribution version."""


class Hello(Strict):
    """``params`` of the client's ``hello`` request."""

    protocol: StrictInt
    proof: StrictStr = Field(max_length=128)
    client: StrictStr = Field(max_length=200)
    """Who is asking (for the worker's log), e.g. ``codespace-server 0.2.0``."""


class Welcome(Strict):
    """``result`` of a successful ``hello``."""

    protocol: StrictInt = PROTOCOL
    worker: StrictStr = WORKER_VERSION
    policy_digest: StrictStr | None
    """sha256 (hex) of the policy file's bytes the worker loaded, or None without a policy file."""
    pid: StrictInt
    uid: StrictInt
    workspace: StrictStr


class Error(Strict):
    """Why a request did not succeed. ``dispatched`` false: it never started, safe to retry;
    true: it may have run (the operation store must not run it again blindly)."""

    code: StrictStr
    message: StrictStr
    dispatched: StrictBool = False
    data: dict[str, Any] = {}


class Request(Strict):
    # A request may carry fields a later minor protocol adds; refusing them would break the
    # exact-version promise in the other direction, so they are ignored.
    model_config = ConfigDict(extra="ignore")

    id: StrictInt = Field(ge=0, le=2**53)
    method: StrictStr = Field(min_length=1, max_length=100)
    params: dict[str, Any] = {}
    fds: StrictInt = Field(0, ge=0)


class Response(Strict):
    id: StrictInt | None
    """None only for an error about a frame that had no readable id."""
    result: dict[str, Any] | None = None
    error: Error | None = None


class Notification(Strict):
    method: StrictStr
    params: dict[str, Any] = {}


def proof(token: bytes, nonce_hex: str) -> str:
    """The ``hello`` proof for ``nonce_hex`` under ``token``."""
    return hmac.new(token, bytes.fromhex(nonce_hex), hashlib.sha256).hexdigest()


def proof_matches(token: bytes, nonce_hex: str, offered: str) -> bool:
    """Constant-time: how much of a wrong proof matched must not show in the time it takes."""
    return hmac.compare_digest(proof(token, nonce_hex).encode(), offered.encode("utf-8", "replace"))


def mismatch_message(theirs: object) -> str:
    return (f"protocol mismatch: this worker speaks protocol {PROTOCOL}, the client asked for protocol {theirs}. "
            f"To proceed: use a client and worker of the same CodeSpace release (both on protocol {PROTOCOL}).")


def error_frame(request_id: int | None, error: Error) -> dict:
    return {"id": request_id, "error": error.model_dump()}


def result_frame(request_id: int, result: dict) -> dict:
    return {"id": request_id, "result": result}


def request_problem(exc: BaseException) -> str:
    """The message for a frame that is not a :class:`Request` (``exc`` from validating it)."""
    if isinstance(exc, RecursionError):
        return "the request is nested too deeply"
    first = exc.errors()[0] if isinstance(exc, ValidationError) and exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ())) or "the frame"
    return (f"not a protocol-5 request ({where}: {first.get('msg', exc)}). A request is "
            "{'id': <int>, 'method': <str>, 'params': <object>}.")

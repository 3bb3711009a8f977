"""Connection limits for the HTTP transport.

uvicorn holds a connection for as long as its client likes: one that never finishes
its headers or its body keeps its socket (and its file descriptor) forever, and
uvicorn does not cap how many it accepts. A loopback port is open to every local
user, so a few thousand half-sent requests could use up the process's descriptors,
lock out the real clients and flood stderr with accept errors. The protocol class
here bounds both: a request must arrive whole within a deadline, and the number of
open connections is capped, a new connection displacing the one that has owed its
request longest rather than being turned away while anyone is merely idling. The
server class keeps descriptors taken by a burst of accepts small beside that cap.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

ENV_MAX_CONNECTIONS = "CODESPACE_HTTP_MAX_CONNECTIONS"
ENV_REQUEST_TIMEOUT = "CODESPACE_HTTP_REQUEST_TIMEOUT"
ENV_MAX_SESSIONS = "CODESPACE_HTTP_MAX_SESSIONS"

# A loopback MCP server serves a handful of agents, each holding a few connections
# (a POST per call in flight, one GET stream, an idle keep-alive or two): 256 is
# ample, and small enough to leave most descriptors to exec sessions (ptys, pipes),
# files and the operation store. Never more than a quarter of the process's limit.
DEFAULT_MAX_CONNECTIONS = 256
# Long enough for any real client on loopback to send a request of the largest
# allowed size; short enough that a descriptor held by a stalled client comes back soon.
DEFAULT_REQUEST_TIMEOUT = 30.0
# asyncio takes create_server's backlog both for the kernel's listen queue and for how
# many connections to accept per wake-up, and each accepted one holds a descriptor
# for a few loop turns before the protocol can close it: that burst, times those
# turns, must fit beside the cap (uvicorn's default, 2048, alone could exceed a common
# 1024-descriptor limit). Connections still in the kernel's queue cost the process
# nothing, so GuardedServer then deepens the queue again: a flood waits there instead
# of having its handshakes dropped and retried a second later, real clients with it.
DEFAULT_ACCEPT_BATCH = 128
# MCP sessions open at once (each about 40 KB, measured); the SDK ends one after 30 min without
# a request and allows 10,000 (400 MB), which a client opening one per call reached (found by
# testing from outside). A few agents need a few each.
DEFAULT_MAX_SESSIONS = 256
SESSION_IDLE_S = 1800.0
LISTEN_QUEUE = 2048
WARNING_INTERVAL = 10.0

_OWES_A_REQUEST = (h11.IDLE, h11.SEND_BODY)


def _raw_response(status: str, message: str) -> bytes:
    body = message.encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


SERVER_FULL = _raw_response(
    "503 Service Unavailable",
    "too many open connections to this CodeSpace server, all busy with requests; retry shortly, and close "
    "connections your client no longer needs",
)
REQUEST_TOO_SLOW = _raw_response(
    "408 Request Timeout",
    "the request did not arrive whole in time (headers and body must arrive within the server's request "
    "timeout of the connection opening or of the previous response); send it again at once",
)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    accept_batch: int = DEFAULT_ACCEPT_BATCH  # connections accepted per wake-up: uvicorn.Config(backlog=...)
    max_sessions: int = DEFAULT_MAX_SESSIONS


def _descriptor_budget() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def limits_from_env(env: Mapping[str, str]) -> ConnectionLimits:
    """The limits, from the environment where an operator (or a test) set them.

    Raises ValueError naming the variable and what it accepts."""
    budget = _descriptor_budget()
    cap = max(16, budget // 4)
    accept_batch = min(DEFAULT_ACCEPT_BATCH, max(8, budget // 16))
    max_connections = min(DEFAULT_MAX_CONNECTIONS, cap)
    raw = env.get(ENV_MAX_CONNECTIONS)
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= cap:
            raise ValueError(f"${ENV_MAX_CONNECTIONS} is {raw!r}; set a whole number from 1 to {cap} "
                             "(a quarter of this process's open-file limit)")
        max_connections = int(raw)
    request_timeout = DEFAULT_REQUEST_TIMEOUT
    raw = env.get(ENV_REQUEST_TIMEOUT)
    if raw:
        try:
            request_timeout = float(raw)
        except ValueError:
            request_timeout = -1.0
        if not 0 < request_timeout <= 3600:
            raise ValueError(f"${ENV_REQUEST_TIMEOUT} is {raw!r}; set a number of seconds above 0 and at most 3600")
    max_sessions = DEFAULT_MAX_SESSIONS
    raw = env.get(ENV_MAX_SESSIONS)
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= 100_000:
            raise ValueError(f"${ENV_MAX_SESSIONS} is {raw!r}; set a whole number from 1 to 100000")
        max_sessions = int(raw)
    return ConnectionLimits(max_connections, request_timeout, accept_batch, max_sessions)


class Throttled:
    """A warning written at most once per interval, with a count of those held back,
    so that an attack costs the log one line every few seconds."""

    def __init__(self, message: str, interval: float = WARNING_INTERVAL) -> None:
        self._message = message
        self._interval = interval
        self._next = 0.0
        self._held = 0

    def __call__(self, *args: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return
        held = f" ({self._held} more since the last such warning)" if self._held else ""
        log.warning(self._message + held, *args)
        self._next = now + self._interval
        self._held = 0


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under ``limits`` (a subclass per server: :func:`guarded_protocol`)."""

    limits: ConnectionLimits = ConnectionLimits()
    displaced: Throttled
    refused: Throttled
    timed_out: Throttled

    # When the client began to owe the request it has not finished, or None while
    # it owes nothing (its request is being answered).
    _owed_since: float | None = None
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Counted before super() registers this connection, so it never displaces itself.
        room = len(self.server_state.connections) < self.limits.max_connections or self._displace_one()
        super().connection_made(transport)
        if not room:
            self.refused()
            transport.write(SERVER_FULL)
            transport.close()
            return
        self._owe_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._settle_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._forget_deadline()  # the next request is timed from this response
            self._settle_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget_deadline()
        super().connection_lost(exc)

    def _owe_request(self) -> None:
        self._owed_since = time.monotonic()
        self._deadline = self.loop.call_later(self.limits.request_timeout, self._request_too_slow)

    def _forget_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._owed_since = None

    def _settle_deadline(self) -> None:
        owes = self.conn.their_state in _OWES_A_REQUEST
        if owes and self._deadline is None:
            self._owe_request()
        elif not owes:
            self._forget_deadline()

    def _request_too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.timed_out(self.limits.request_timeout)
        self._close(REQUEST_TOO_SLOW)

    def _close(self, response: bytes) -> None:
        # A response may go only where none is under way; an app still waiting for
        # the body gets a disconnect instead, which it takes quietly.
        if self.conn.our_state is h11.IDLE:
            self.transport.write(response)
        self.transport.close()

    def _displace_one(self) -> bool:
        """Close the open connection that has owed its request longest; False when every
        connection is busy answering one."""
        owing = [c for c in self.server_state.connections
                 if isinstance(c, GuardedH11Protocol) and c._owed_since is not None
                 and not c.transport.is_closing()]
        if not owing:
            return False
        oldest = min(owing, key=lambda c: c._owed_since or 0.0)
        self.displaced()
        oldest._forget_deadline()
        oldest._close(SERVER_FULL)
        return True


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol under ``limits``; pass it as ``uvicorn.Config(http=...)``.

    A class per server, so its warnings are throttled per server."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {
        "limits": limits,
        "displaced": Throttled("closed the connection that had owed its request longest to admit a new one: "
                               f"{limits.max_connections} connections were open (${ENV_MAX_CONNECTIONS})"),
        "refused": Throttled(f"refused a connection with 503: {limits.max_connections} connections were open and "
                             f"all busy with requests (${ENV_MAX_CONNECTIONS})"),
        "timed_out": Throttled("closed a connection whose request did not arrive whole within %gs "
                               f"(${ENV_REQUEST_TIMEOUT})"),
    })


class GuardedServer(uvicorn.Server):
    """uvicorn's server, with accepted connections bursting ``Config(backlog=...)`` at a
    time out of a ``LISTEN_QUEUE``-deep kernel queue."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        for sock in sockets or ():
            sock.listen(LISTEN_QUEUE)


_ACCEPT_OUT_OF_RESOURCES = "socket.accept() out of system resource"


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio reports each accept() that fails for want of descriptors with a full
    traceback; the connection cap should keep that from happening, but if other work
    uses the descriptors up, one line per interval says so instead of a flood."""
    previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any] | None = loop.get_exception_handler()
    warn = Throttled("cannot accept HTTP connections: %s; the process is out of file descriptors "
                     "(raise its open-file limit, or lower $" + ENV_MAX_CONNECTIONS + ")")

    def handler(the_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == _ACCEPT_OUT_OF_RESOURCES:
            warn(context.get("exception"))
        elif previous is not None:
            previous(the_loop, context)
        else:
            the_loop.default_exception_handler(context)

    loop.set_exception_handler(handler)

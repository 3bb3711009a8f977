"""The egress proxy: HTTP (absolute-form and CONNECT) and SOCKS5 on one listener.

The protocol is told apart by the first byte (0x05 opens a SOCKS5 greeting); the two sides
are :mod:`.http_proxy` and :mod:`.socks5`. Each judges every request at the proxy's one
:class:`~.checkpoint.Checkpoint` (domain rules, one resolution, every resolved address,
the audit event) and connects only to an address that was checked (:mod:`.connections`).
This module holds the listeners, the dispatch of a connection, and the SOCKS5 UDP relays.
"""

from __future__ import annotations

import logging
import resource
import socket
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream

from ..proxy_route import LISTEN_BACKLOG
from . import http_proxy, socks5, sockets
from .checkpoint import AuditSink, Checkpoint, Resolver, system_resolver
from .connections import ProtocolError, Reader
from .rules import DomainRules
from .sockets import RawStream
from .udp import UdpRelay

log = logging.getLogger(__name__)


def connection_limits() -> tuple[int, int]:
    """(connections through the whole proxy, through one route at once): each holds two of the
    server's descriptors (the client's and the destination's), and the proxy may take a quarter
    of the open-file limit, so that one command's connections cannot starve the server's tools
    or the other commands' routes (found by testing: 20,000 idle connections from one command
    left read_file failing with EMFILE)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = soft if soft != resource.RLIM_INFINITY else 1 << 20
    total = max(16, min(2048, budget // 8))
    return total, max(8, min(256, total // 2))


class EgressProxy:
    def __init__(self, rules: DomainRules, audit: AuditSink, resolver: Resolver = system_resolver, *,
                 udp: bool = False) -> None:
        self.checkpoint = Checkpoint(rules, audit, resolver)
        self.udp = udp  # SOCKS5 UDP ASSOCIATE (network.enable_socks5_udp)
        self.active = 0
        self._route_relays: dict[str, UdpRelay] = {}  # a sandbox route's relay, by its key
        self.limits = connection_limits()
        self._all_routes = anyio.CapacityLimiter(self.limits[0])

    # -- UDP --------------------------------------------------------------------------

    async def serve_route_udp(self, sock: socket.socket, operation_id: str) -> None:
        """Relay for the route ``operation_id``: ``sock`` is the UDP socket its helper bound
        inside the sandbox, next to the TCP listener (closed when this ends)."""
        relay = UdpRelay(sock, self._udp_judge(operation_id), always_open=False)
        self._route_relays[operation_id] = relay
        try:
            await relay.run()
        finally:
            self._route_relays.pop(operation_id, None)

    def _udp_judge(self, operation_id: str | None):  # noqa: ANN202
        async def judge(host: str, port: int) -> tuple[bool, list[str]]:
            verdict, _, addresses = await self.checkpoint.judge(host, port, None, "socks5-udp", operation_id)
            return verdict.allowed, addresses
        return judge

    async def _udp_associate(self, reader: Reader, operation_id: str | None) -> None:
        """Hold a UDP association for as long as its TCP connection stays open."""
        shared = self._route_relays.get(operation_id) if operation_id is not None else None
        relay = shared
        if relay is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            relay = UdpRelay(sock, self._udp_judge(operation_id), always_open=True)
        else:
            relay.associations += 1
        reader.relaying()  # the association lasts as long as its connection
        # A route's shared relay is in its sandbox's namespace; an association's own is on this host.
        disown = self.own(relay.client, "udp") if shared is None else None
        try:
            host, port = relay.address
            await reader.stream.send(socks5.bound_reply(host, port))
            async with anyio.create_task_group() as tg:
                if shared is None:
                    tg.start_soon(relay.run)
                while await reader.fill():  # RFC 1928: the association ends with its TCP connection
                    reader.buffer.clear()
                tg.cancel_scope.cancel()
        finally:
            if disown is not None:
                disown()
            if shared is not None:
                relay.associations -= 1
            else:
                relay.close()

    # -- listeners ----------------------------------------------------------------

    async def serve_tcp(self, host: str = "127.0.0.1", port: int = 0, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        listener = socket.create_server((host, port), backlog=LISTEN_BACKLOG)
        disown = self.own(listener, "tcp")
        try:
            task_status.started(listener.getsockname()[1])
            await self.serve_listener(listener, None)
        finally:
            disown()

    async def serve_listener(self, listener: socket.socket, operation_id: str | None) -> None:
        """Serve connections from a listening socket (closed when this ends), attributed to
        ``operation_id`` (an opaque key the audit sink receives). A listener on this host (not in
        a sandbox's network namespace) is made the proxy's own (:meth:`own`) by whoever opened it."""
        limits = {"the proxy": self._all_routes, "one route": anyio.CapacityLimiter(self.limits[1])}
        await sockets.serve(listener, lambda conn: self.handle(RawStream(conn), operation_id), limits)

    def own(self, sock: socket.socket, transport: str) -> Callable[[], None]:
        """Refuse ``sock``'s port on this host as a destination until the returned function is
        called: a command that reached a listener of the proxy through the proxy would have its
        inner requests judged without its identity (with allow_local_binding on)."""
        key = (transport, sock.getsockname()[1])
        ports = self.checkpoint.own_ports
        ports[key] += 1
        done = False

        def disown() -> None:
            nonlocal done
            if not done:
                done = True
                ports[key] -= 1
                if ports[key] <= 0:
                    del ports[key]
        return disown

    # -- connections ----------------------------------------------------------------

    async def handle(self, client: ByteStream, operation_id: str | None, *, initial: bytes = b"") -> None:
        """Serve one client connection; ``initial``: bytes already read from it."""
        self.active += 1
        try:
            async with client:
                reader = Reader(client)
                reader.expect_request()
                reader.buffer += initial
                if not reader.buffer and not await reader.fill():
                    return
                if reader.buffer[0] == 0x05:
                    await socks5.serve(self.checkpoint, reader, operation_id,
                                       self._udp_associate if self.udp else None)
                else:
                    await http_proxy.serve(self.checkpoint, reader, operation_id)
        except ProtocolError as exc:
            log.debug("proxy: %s", exc)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            pass
        except Exception:  # noqa: BLE001 - one connection must never take its listener down
            log.exception("proxy: connection failed")
        finally:
            self.active -= 1

"""SOCKS5 UDP ASSOCIATE (RFC 1928 §7), off unless ``network.enable_socks5_udp``.

A relay has a *client side* (the UDP socket clients send their wrapped datagrams to) and
an *outside* (one UDP socket per address family, on the host). Each client datagram
carries its destination in a SOCKS header; the destination is judged by the same rules as
a TCP connection (names, resolution once, private ranges, limited mode), the verdict is
cached for the relay's life (so the audit trail gets one event per destination, not per
datagram), and the payload goes to the address that was checked. Only answers from a
destination this relay has sent to are relayed back, wrapped in a SOCKS header naming it.
Fragments (FRAG ≠ 0) are dropped, as RFC 1928 allows.

Two shapes:

- per association: a connection that reached the proxy on the host gets a relay socket of
  its own on 127.0.0.1, alive while the association's TCP connection is open;
- per route (a bubblewrap sandbox): the helper hands the proxy a UDP socket bound to
  ``127.0.0.1:<port>`` inside the sandbox's network namespace, next to the TCP listener;
  it relays only while at least one association on that route is open.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger(__name__)

MAX_DATAGRAM = 65535
MAX_DESTINATIONS = 1024  # cached verdicts and reply routes per relay (oldest dropped)

Judge = Callable[[str, int], Awaitable[tuple[bool, list[str]]]]


def parse(datagram: bytes) -> tuple[str, int, bytes] | None:
    """(host, port, payload) of a client datagram, or None when it is malformed or a fragment."""
    if len(datagram) < 4 or datagram[:2] != b"\0\0" or datagram[2] != 0:
        return None
    kind, rest = datagram[3], datagram[4:]
    if kind == 0x01 and len(rest) >= 6:
        host, rest = str(ipaddress.IPv4Address(rest[:4])), rest[4:]
    elif kind == 0x04 and len(rest) >= 18:
        host, rest = str(ipaddress.IPv6Address(rest[:16])), rest[16:]
    elif kind == 0x03 and rest and len(rest) >= 1 + rest[0] + 2:
        length = rest[0]
        host, rest = rest[1:1 + length].decode("ascii", "replace"), rest[1 + length:]
    else:
        return None
    (port,) = struct.unpack("!H", rest[:2])
    return host, port, rest[2:]


def wrap(address: str, port: int, payload: bytes) -> bytes:
    ip = ipaddress.ip_address(address)
    kind = b"\x01" if ip.version == 4 else b"\x04"
    return b"\0\0\0" + kind + ip.packed + struct.pack("!H", port) + payload


class UdpRelay:
    def __init__(self, client: socket.socket, judge: Judge, *, always_open: bool) -> None:
        client.setblocking(False)
        self.client = client
        self.judge = judge
        self.associations = 1 if always_open else 0
        self._outside: dict[int, socket.socket] = {}
        self._verdicts: OrderedDict[tuple[str, int], tuple[bool, list[str]]] = OrderedDict()
        self._replies: OrderedDict[tuple[str, int], tuple] = OrderedDict()  # destination -> client address

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.client.getsockname()[:2]
        return host, port

    def close(self) -> None:
        self.client.close()
        for sock in self._outside.values():
            sock.close()

    async def run(self) -> None:
        """Relay until cancelled (the caller's scope: the association or the route)."""
        try:
            async with anyio.create_task_group() as tg:
                for family, anywhere in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                    try:
                        sock = socket.socket(family, socket.SOCK_DGRAM)
                    except OSError:
                        continue  # no IPv6 on this host: IPv6 destinations are dropped
                    self._outside[family] = sock
                    sock.setblocking(False)
                    sock.bind((anywhere, 0))
                    tg.start_soon(self._answers, sock)
                await self._requests()
        finally:
            self.close()

    async def _requests(self) -> None:
        while True:
            await anyio.wait_readable(self.client)
            try:
                datagram, source = self.client.recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                continue
            if self.associations <= 0:
                continue  # nobody asked for UDP on this route right now
            parsed = parse(datagram)
            if parsed is None:
                continue
            host, port, payload = parsed
            allowed, addresses = await self._verdict(host, port)
            if not allowed or not addresses:
                continue
            address = addresses[0]
            outside = self._outside.get(socket.AF_INET6 if ":" in address else socket.AF_INET)
            if outside is None:
                continue
            try:
                outside.sendto(payload, (address, port))
            except OSError as exc:
                log.debug("proxy udp: sending to %s:%d failed: %s", address, port, exc)
                continue
            self._remember(self._replies, (address, port), source)

    async def _answers(self, sock: socket.socket) -> None:
        while True:
            await anyio.wait_readable(sock)
            try:
                payload, origin = sock.recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                continue
            key = (origin[0], origin[1])
            client = self._replies.get(key)
            if client is None:
                continue  # only destinations we sent to may answer
            try:
                self.client.sendto(wrap(key[0], key[1], payload), client)
            except OSError as exc:
                log.debug("proxy udp: relaying an answer failed: %s", exc)

    async def _verdict(self, host: str, port: int) -> tuple[bool, list[str]]:
        key = (host.lower(), port)
        cached = self._verdicts.get(key)
        if cached is None:
            cached = await self.judge(host, port)
            self._remember(self._verdicts, key, cached)
        return cached

    @staticmethod
    def _remember(table: OrderedDict, key: object, value: object) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MAX_DESTINATIONS:
            table.popitem(last=False)

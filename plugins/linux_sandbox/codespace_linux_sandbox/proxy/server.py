"""The egress proxy: HTTP (absolute-form and CONNECT) and SOCKS5 on one listener.

The protocol is told apart by the first byte (0x05 opens a SOCKS5 greeting). Every
request is judged by the domain rules, the name is resolved once here, every
address it resolves to is checked, and the connection goes to an address that was
checked — there is no second resolution for a rebinding to slip into. A plain HTTP
connection is pinned to its first host: each later request on it is parsed and
judged again (method policy included), never spliced through unchecked.

Every decision is handed to an audit sink; full URLs never are (host, port and
method only).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream

from . import sockets
from .rules import DomainRules, Verdict, blocked, normalize_host
from .sockets import RawStream
from .udp import UdpRelay

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
CHUNK = 65536
LISTEN_BACKLOG = 512
CONNECT_TIMEOUT_S = 10.0
HOP_BY_HOP = {"proxy-connection", "proxy-authorization", "keep-alive", "te", "trailer", "upgrade"}

SOCKS_OK, SOCKS_NOT_ALLOWED, SOCKS_HOST_UNREACHABLE, SOCKS_REFUSED = 0x00, 0x02, 0x04, 0x05
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 0x07, 0x08


@dataclass(frozen=True)
class AuditEvent:
    decision: str  # "allow" | "deny"
    reason: str
    protocol: str  # "http" | "connect" | "socks5"
    host: str
    port: int
    method: str | None
    operation_id: str | None
    at: float


AuditSink = Callable[[AuditEvent], None]
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for *_, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.append(sockaddr[0])
    return seen


class ProtocolError(Exception):
    pass


class _Reader:
    """Reads from a byte stream with lookahead; what is left over is forwarded first."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def fill(self) -> bool:
        try:
            chunk = await self.stream.receive(CHUNK)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        self.buffer += chunk
        return True

    async def until(self, marker: bytes, limit: int = MAX_HEAD) -> bytes | None:
        while True:
            index = self.buffer.find(marker)
            if index >= 0:
                data = bytes(self.buffer[: index + len(marker)])
                del self.buffer[: index + len(marker)]
                return data
            if len(self.buffer) > limit:
                raise ProtocolError("request head too large")
            if not await self.fill():
                return None

    async def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not await self.fill():
                raise ProtocolError("connection closed early")
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def take_buffered(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


class EgressProxy:
    def __init__(self, rules: DomainRules, audit: AuditSink, resolver: Resolver = system_resolver, *,
                 udp: bool = False) -> None:
        self.rules = rules
        self.audit = audit
        self.resolver = resolver
        self.udp = udp  # SOCKS5 UDP ASSOCIATE (network.enable_socks5_udp)
        self.active = 0
        self._route_relays: dict[str, UdpRelay] = {}  # a sandbox route's relay, by its key

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
            verdict, _, addresses = await self._judge(host, port, None, "socks5-udp", operation_id)
            return verdict.allowed, addresses
        return judge

    async def _udp_associate(self, reader: _Reader, operation_id: str | None) -> None:
        """Hold a UDP association for as long as its TCP connection stays open."""
        shared = self._route_relays.get(operation_id) if operation_id is not None else None
        relay = shared
        if relay is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            relay = UdpRelay(sock, self._udp_judge(operation_id), always_open=True)
        else:
            relay.associations += 1
        try:
            host, port = relay.address
            await reader.stream.send(bytes([0x05, SOCKS_OK, 0x00, 0x01]) + ipaddress.IPv4Address(host).packed
                                     + struct.pack("!H", port))
            async with anyio.create_task_group() as tg:
                if shared is None:
                    tg.start_soon(relay.run)
                while await reader.fill():  # RFC 1928: the association ends with its TCP connection
                    reader.buffer.clear()
                tg.cancel_scope.cancel()
        finally:
            if shared is not None:
                relay.associations -= 1
            else:
                relay.close()

    # -- listeners ----------------------------------------------------------------

    async def serve_tcp(self, host: str = "127.0.0.1", port: int = 0, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        listener = socket.create_server((host, port), backlog=LISTEN_BACKLOG)
        task_status.started(listener.getsockname()[1])
        await self.serve_listener(listener, None)

    async def serve_listener(self, listener: socket.socket, operation_id: str | None) -> None:
        """Serve connections from a listening socket (closed when this ends), attributed to
        ``operation_id`` (an opaque key the audit sink receives)."""
        await sockets.serve(listener, lambda conn: self.handle(RawStream(conn), operation_id))

    # -- connections ----------------------------------------------------------------

    async def handle(self, client: ByteStream, operation_id: str | None, *, initial: bytes = b"") -> None:
        """Serve one client connection; ``initial``: bytes already read from it."""
        self.active += 1
        try:
            async with client:
                reader = _Reader(client)
                reader.buffer += initial
                if not reader.buffer and not await reader.fill():
                    return
                if reader.buffer[0] == 0x05:
                    await self._socks5(reader, operation_id)
                else:
                    await self._http(reader, operation_id)
        except ProtocolError as exc:
            log.debug("proxy: %s", exc)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            pass
        except Exception:  # noqa: BLE001 - one connection must never take its listener down
            log.exception("proxy: connection failed")
        finally:
            self.active -= 1

    def _record(self, verdict: Verdict, protocol: str, host: str, port: int, method: str | None,
                operation_id: str | None) -> None:
        self.audit(AuditEvent("allow" if verdict.allowed else "deny", verdict.reason, protocol, host, port,
                              method, operation_id, time.time()))

    async def _judge(self, raw_host: str, port: int, method: str | None, protocol: str,
                     operation_id: str | None) -> tuple[Verdict, str, list[str]]:
        """Rules, then resolution once, then every resolved address."""
        host = normalize_host(raw_host)
        if host is None or not 0 < port < 65536:
            verdict = blocked("invalid-host")
            self._record(verdict, protocol, raw_host[:255], port, method, operation_id)
            return verdict, raw_host, []
        verdict = self.rules.check_host(host)
        if verdict.allowed:
            # A tunnel (CONNECT, SOCKS5) is opaque: limited mode refuses it, as upstream does
            # without its TLS interception.
            verdict = self.rules.check_method(method or "CONNECT")
        addresses: list[str] = []
        if verdict.allowed:
            try:
                addresses = [host] if _is_ip(host) else await self.resolver(host, port)
            except OSError:
                addresses = []
            verdict = self.rules.check_addresses(addresses) if addresses else Verdict(False, "unresolvable")
        self._record(verdict, protocol, host, port, method, operation_id)
        return verdict, host, addresses

    async def _connect(self, addresses: list[str], port: int) -> RawStream | None:
        for address in addresses:
            try:
                with anyio.fail_after(CONNECT_TIMEOUT_S):
                    return await sockets.connect(address, port)
            except (OSError, TimeoutError):
                continue
        return None

    # -- HTTP ------------------------------------------------------------------------

    async def _http(self, reader: _Reader, operation_id: str | None) -> None:
        head = await reader.until(b"\r\n\r\n")
        if head is None:
            return
        method, target, version, headers = _parse_head(head)
        if method == "CONNECT":
            await self._connect_tunnel(reader, target, operation_id)
            return
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            await _respond(reader.stream, 400, "blocked-by-allowlist" if url.scheme == "https" else None,
                           "absolute http:// URLs or CONNECT only (use CONNECT for https)")
            return
        port = url.port or 80
        upstream, host = await self._http_upstream(reader, url.hostname, port, method, "http", operation_id)
        if upstream is None:
            return
        async with upstream, anyio.create_task_group() as tg:
            responses_done = anyio.Event()
            refusing = False

            async def responses() -> None:
                await _pump(upstream, reader.stream, eof=False)
                responses_done.set()
                if not refusing:
                    await _half_close(reader.stream)
                    tg.cancel_scope.cancel()

            async def refuse(status: int, error: str | None, message: str) -> None:
                # Let the answers to the requests already forwarded reach the client first.
                nonlocal refusing
                refusing = True
                await _half_close(upstream)
                with anyio.move_on_after(CONNECT_TIMEOUT_S * 3):
                    await responses_done.wait()
                await _respond(reader.stream, status, error, message)
                tg.cancel_scope.cancel()

            tg.start_soon(responses)
            pinned = (host, port)
            while True:
                await upstream.send(_origin_form(method, url, version, headers, host, port))
                await _forward_body(reader, upstream, headers)
                head = await reader.until(b"\r\n\r\n")
                if head is None:
                    await _half_close(upstream)
                    return
                method, target, version, headers = _parse_head(head)
                url = urlsplit(target)
                next_host = normalize_host(url.hostname or "") if url.scheme == "http" else None
                if (next_host, url.port or 80) != pinned:
                    await refuse(400, None, "one destination per proxy connection; open a new one")
                    return
                verdict = self.rules.check_method(method)
                self._record(verdict, "http", host, port, method, operation_id)
                if not verdict.allowed:
                    await refuse(403, verdict.header, _why(verdict))
                    return

    async def _http_upstream(self, reader: _Reader, raw_host: str, port: int, method: str | None, protocol: str,
                             operation_id: str | None) -> tuple[RawStream | None, str]:
        """Judge the destination and connect to a checked address; on refusal or failure the
        client has its HTTP answer (403 / 502) and the stream is None."""
        verdict, host, addresses = await self._judge(raw_host, port, method, protocol, operation_id)
        if not verdict.allowed:
            await _respond(reader.stream, 403 if verdict.header else 502, verdict.header, _why(verdict))
            return None, host
        upstream = await self._connect(addresses, port)
        if upstream is None:
            await _respond(reader.stream, 502, None, "the destination did not accept the connection")
        return upstream, host

    async def _connect_tunnel(self, reader: _Reader, target: str, operation_id: str | None) -> None:
        host, _, port_text = target.rpartition(":")
        port = int(port_text) if port_text.isdigit() else 0
        upstream, _ = await self._http_upstream(reader, host or target, port, None, "connect", operation_id)
        if upstream is None:
            return
        async with upstream:
            await reader.stream.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await _tunnel(reader, upstream)

    # -- SOCKS5 ---------------------------------------------------------------------

    async def _socks5(self, reader: _Reader, operation_id: str | None) -> None:
        version, count = await reader.exactly(2)
        methods = await reader.exactly(count)
        if 0x00 not in methods:
            await reader.stream.send(b"\x05\xff")  # only "no authentication" is offered
            return
        await reader.stream.send(b"\x05\x00")
        _, command, _, kind = await reader.exactly(4)
        if kind == 0x01:
            host = str(ipaddress.IPv4Address(await reader.exactly(4)))
        elif kind == 0x04:
            host = str(ipaddress.IPv6Address(await reader.exactly(16)))
        elif kind == 0x03:
            (length,) = await reader.exactly(1)
            host = (await reader.exactly(length)).decode("ascii", "replace")
        else:
            await _socks_reply(reader.stream, SOCKS_BAD_ADDRESS)
            return
        (port,) = struct.unpack("!H", await reader.exactly(2))
        if command == 0x03 and self.udp:
            await self._udp_associate(reader, operation_id)
            return
        if command != 0x01:  # BIND is not offered; UDP ASSOCIATE only with network.enable_socks5_udp
            reason = "socks-udp-disabled" if command == 0x03 else "socks-command"
            self._record(Verdict(False, reason), "socks5", host, port, None, operation_id)
            await _socks_reply(reader.stream, SOCKS_BAD_COMMAND)
            return
        verdict, _, addresses = await self._judge(host, port, None, "socks5", operation_id)
        if not verdict.allowed:
            code = SOCKS_HOST_UNREACHABLE if verdict.reason == "unresolvable" else SOCKS_NOT_ALLOWED
            await _socks_reply(reader.stream, code)
            return
        upstream = await self._connect(addresses, port)
        if upstream is None:
            await _socks_reply(reader.stream, SOCKS_REFUSED)
            return
        async with upstream:
            await _socks_reply(reader.stream, SOCKS_OK)
            await _tunnel(reader, upstream)


# -- helpers --------------------------------------------------------------------------


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _why(verdict: Verdict) -> str:
    return {
        "denylist": "the destination matches network.denied_domains",
        "allowlist": "the destination is not in network.allowed_domains",
        "method": "network.mode = 'limited' allows only GET, HEAD and OPTIONS",
        "private-address": "the destination is a local or private address (network.allow_local_binding is off)",
        "invalid-host": "the destination host is not a valid name",
        "unresolvable": "the destination name does not resolve",
        "socks-udp-disabled": "SOCKS5 UDP needs network.enable_socks5_udp = true",
    }.get(verdict.reason, verdict.reason)


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("latin-1")
        request_line, *lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError as exc:
        raise ProtocolError("malformed request line") from exc
    headers = []
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError("malformed header")
        headers.append((name.strip(), value.strip()))
    return method.upper(), target, version, headers


def _origin_form(method: str, url, version: str, headers: list[tuple[str, str]], host: str, port: int) -> bytes:  # noqa: ANN001
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    out = [f"{method} {path} {version}"]
    has_host = False
    for name, value in headers:
        lower = name.lower()
        if lower in HOP_BY_HOP:
            continue
        has_host |= lower == "host"
        out.append(f"{name}: {value}")
    if not has_host:
        out.append(f"Host: {host}" + (f":{port}" if port != 80 else ""))
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


async def _forward_body(reader: _Reader, upstream: ByteStream, headers: list[tuple[str, str]]) -> None:
    fields = {name.lower(): value for name, value in headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.until(b"\r\n", 4096)
            if size_line is None:
                raise ProtocolError("truncated chunked body")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            await upstream.send(size_line)
            if size == 0:
                while True:  # trailers, up to the blank line
                    line = await reader.until(b"\r\n", MAX_HEAD)
                    if line is None:
                        raise ProtocolError("truncated trailers")
                    await upstream.send(line)
                    if line == b"\r\n":
                        return
            await upstream.send(await reader.exactly(size + 2))
    remaining = int(fields.get("content-length", "0") or 0)
    while remaining > 0:
        if not reader.buffer and not await reader.fill():
            raise ProtocolError("truncated body")
        piece = bytes(reader.buffer[:remaining])
        del reader.buffer[: len(piece)]
        await upstream.send(piece)
        remaining -= len(piece)


async def _respond(stream: ByteStream, status: int, error: str | None, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = f"{message}\n".encode()
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: text/plain; charset=utf-8",
             f"Content-Length: {len(body)}", "Connection: close"]
    if error:
        lines.append(f"x-proxy-error: {error}")
    try:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


async def _socks_reply(stream: ByteStream, code: int) -> None:
    await stream.send(bytes([0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]))


async def _half_close(stream: ByteStream) -> None:
    try:
        await stream.send_eof()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, NotImplementedError):
        pass


async def _pump(source: ByteStream, sink: ByteStream, *, eof: bool = True) -> None:
    try:
        while True:
            await sink.send(await source.receive(CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    if eof:
        await _half_close(sink)


async def _tunnel(reader: _Reader, upstream: ByteStream) -> None:
    leftover = reader.take_buffered()
    if leftover:
        await upstream.send(leftover)
    if isinstance(reader.stream, RawStream) and isinstance(upstream, RawStream):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sockets.pump, reader.stream, upstream)
            tg.start_soon(sockets.pump, upstream, reader.stream)
        return
    done = 0

    async def one_way(source: ByteStream, sink: ByteStream) -> None:
        nonlocal done
        await _pump(source, sink)
        done += 1
        if done == 2:
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one_way, reader.stream, upstream)
        tg.start_soon(one_way, upstream, reader.stream)

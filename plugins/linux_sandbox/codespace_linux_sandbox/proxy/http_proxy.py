"""The HTTP side of the proxy: absolute-form ``http://`` requests, and ``CONNECT`` tunnels.

A plain HTTP connection is pinned to its first host: each later request on it is parsed
and judged again (method policy included), never spliced through unchecked. A refusal is an
HTTP answer whose body names the setting: ``403`` with ``x-proxy-error`` when a rule
refused, ``502`` when the name does not resolve or the destination does not accept.

Where the next request starts is decided here, and the destination must decide the same:
a request whose body could be framed two ways (two ``Content-Length`` headers, both
``Content-Length`` and ``Transfer-Encoding``, a coding other than ``chunked``) is refused
(``400``), as is a body on a request in limited mode (the destination may take a GET's body
for a second request the proxy never judged). The ``Host`` header is the request target's,
whatever the client sent (RFC 9112, 3.2.2), and bodies are streamed, never held whole.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream

from .checkpoint import Checkpoint
from .connections import (CONNECT_TIMEOUT_S, MAX_HEAD, ProtocolError, Reader, connect_checked, half_close, pump,
                          tunnel)
from .rules import Verdict, blocked, normalize_host
from .sockets import RawStream

HOP_BY_HOP = {"proxy-connection", "proxy-authorization", "keep-alive", "te", "trailer", "upgrade"}
LIMITED_BODY = "network.mode = 'limited' allows only GET, HEAD and OPTIONS requests, without a body"
_LENGTH = re.compile(r"[0-9]{1,18}")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
CHUNKED = -1


class Refusal(Exception):
    """A request the proxy answers itself: (status, x-proxy-error or None, message)."""

    def __init__(self, status: int, error: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


async def serve(checkpoint: Checkpoint, reader: Reader, operation_id: str | None) -> None:
    head = await reader.until(b"\r\n\r\n")
    if head is None:
        return
    method, target, version, headers = _parse_head(head)
    if method == "CONNECT":
        await _connect_tunnel(checkpoint, reader, target, operation_id)
        return
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        await _respond(reader.stream, 400, "blocked-by-allowlist" if url.scheme == "https" else None,
                       "absolute http:// URLs or CONNECT only (use CONNECT for https)")
        return
    port = url.port or 80
    try:
        body = _body(checkpoint, method, headers, url.hostname, port, operation_id)
    except Refusal as refusal:
        await _respond(reader.stream, refusal.status, refusal.error, refusal.message)
        return
    upstream, host = await _upstream(checkpoint, reader, url.hostname, port, method, "http", operation_id)
    if upstream is None:
        return
    async with upstream, anyio.create_task_group() as tg:
        responses_done = anyio.Event()
        refusing = False

        async def responses() -> None:
            await pump(upstream, reader.stream, eof=False)
            responses_done.set()
            if not refusing:
                await half_close(reader.stream)
                tg.cancel_scope.cancel()

        async def refuse(status: int, error: str | None, message: str) -> None:
            # Let the answers to the requests already forwarded reach the client first.
            nonlocal refusing
            refusing = True
            await half_close(upstream)
            with anyio.move_on_after(CONNECT_TIMEOUT_S * 3):
                await responses_done.wait()
            await _respond(reader.stream, status, error, message)
            tg.cancel_scope.cancel()

        tg.start_soon(responses)
        pinned = (host, port)
        while True:
            reader.relaying()
            await upstream.send(_origin_form(method, url, version, headers, host, port))
            await _forward_body(reader, upstream, body)
            reader.expect_request()
            head = await reader.until(b"\r\n\r\n")
            if head is None:
                await half_close(upstream)
                return
            method, target, version, headers = _parse_head(head)
            url = urlsplit(target)
            next_host = normalize_host(url.hostname or "") if url.scheme == "http" else None
            if (next_host, url.port or 80) != pinned:
                await refuse(400, None, "one destination per proxy connection; open a new one")
                return
            verdict = checkpoint.rules.check_method(method)
            checkpoint.record(verdict, "http", host, port, method, operation_id)
            if not verdict.allowed:
                await refuse(403, verdict.header, _why(verdict))
                return
            try:
                body = _body(checkpoint, method, headers, host, port, operation_id)
            except Refusal as refusal:
                await refuse(refusal.status, refusal.error, refusal.message)
                return


def _body(checkpoint: Checkpoint, method: str, headers: list[tuple[str, str]], host: str, port: int,
          operation_id: str | None) -> int:
    """The request body's length (CHUNKED for a chunked one); a Refusal when the body could be
    framed two ways, or when limited mode allows no body."""
    lengths = [value for name, value in headers if name.lower() == "content-length"]
    codings = [value for name, value in headers if name.lower() == "transfer-encoding"]
    if codings and lengths:
        raise Refusal(400, None, "a request with both Transfer-Encoding and Content-Length is ambiguous; send one")
    if codings and "".join(",".join(codings).split()).lower() != "chunked":
        raise Refusal(400, None, "only 'Transfer-Encoding: chunked' is forwarded")
    if len(lengths) > 1:
        raise Refusal(400, None, "more than one Content-Length header; send one")
    if lengths and not _LENGTH.fullmatch(lengths[0]):
        raise Refusal(400, None, f"Content-Length must be a decimal number, not {lengths[0][:40]!r}")
    length = CHUNKED if codings else int(lengths[0]) if lengths else 0
    if length and checkpoint.rules.limited:
        checkpoint.record(blocked("method"), "http", normalize_host(host) or host[:255], port, method, operation_id)
        raise Refusal(403, blocked("method").header, LIMITED_BODY)
    return length


async def _upstream(checkpoint: Checkpoint, reader: Reader, raw_host: str, port: int, method: str | None,
                    protocol: str, operation_id: str | None) -> tuple[RawStream | None, str]:
    """Judge the destination and connect to a checked address; on refusal or failure the
    client has its HTTP answer (403 / 502) and the stream is None."""
    verdict, host, addresses = await checkpoint.judge(raw_host, port, method, protocol, operation_id)
    if not verdict.allowed:
        await _respond(reader.stream, 403 if verdict.header else 502, verdict.header, _why(verdict))
        return None, host
    upstream = await connect_checked(addresses, port)
    if upstream is None:
        await _respond(reader.stream, 502, None, "the destination did not accept the connection")
    return upstream, host


async def _connect_tunnel(checkpoint: Checkpoint, reader: Reader, target: str, operation_id: str | None) -> None:
    host, _, port_text = target.rpartition(":")
    port = int(port_text) if port_text.isdigit() else 0
    upstream, _ = await _upstream(checkpoint, reader, host or target, port, None, "connect", operation_id)
    if upstream is None:
        return
    async with upstream:
        await reader.stream.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await tunnel(reader, upstream)


def _why(verdict: Verdict) -> str:
    return {
        "denylist": "the destination matches network.denied_domains",
        "allowlist": "the destination is not in network.allowed_domains",
        "method": "network.mode = 'limited' allows only GET, HEAD and OPTIONS",
        "private-address": "the destination is a local or private address (network.allow_local_binding is off)",
        "proxy-itself": "the destination is this proxy itself",
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
    authority = f"[{host}]" if ":" in host else host
    out = [f"{method} {path} {version}", f"Host: {authority}" + (f":{port}" if port != 80 else "")]
    for name, value in headers:
        if name.lower() in HOP_BY_HOP or name.lower() == "host":  # the target's, not the client's
            continue
        out.append(f"{name}: {value}")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


async def _forward_body(reader: Reader, upstream: ByteStream, length: int) -> None:
    if length != CHUNKED:
        await reader.copy_exactly(length, upstream)
        return
    while True:
        size_line = await reader.until(b"\r\n", 4096)
        if size_line is None:
            raise ProtocolError("truncated chunked body")
        size_text = size_line[:-2].split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise ProtocolError("malformed chunk size")
        size = int(size_text, 16)
        await upstream.send(size_line)
        if size == 0:
            while True:  # trailers, up to the blank line
                line = await reader.until(b"\r\n", MAX_HEAD)
                if line is None:
                    raise ProtocolError("truncated trailers")
                await upstream.send(line)
                if line == b"\r\n":
                    return
        await reader.copy_exactly(size, upstream)
        if await reader.exactly(2) != b"\r\n":
            raise ProtocolError("a chunk does not end where its size says")
        await upstream.send(b"\r\n")


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

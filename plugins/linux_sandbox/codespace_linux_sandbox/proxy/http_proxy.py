"""The HTTP side of the proxy: absolute-form ``http://`` requests, and ``CONNECT`` tunnels.

A plain HTTP connection is pinned to its first host: each later request on it is parsed
and judged again (method policy included), never spliced through unchecked. A refusal is an
HTTP answer whose body names the setting: ``403`` with ``x-proxy-error`` when a rule
refused, ``502`` when the name does not resolve or the destination does not accept.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream

from .checkpoint import Checkpoint
from .connections import (CONNECT_TIMEOUT_S, MAX_HEAD, ProtocolError, Reader, connect_checked, half_close, pump,
                          tunnel)
from .rules import Verdict, normalize_host
from .sockets import RawStream

HOP_BY_HOP = {"proxy-connection", "proxy-authorization", "keep-alive", "te", "trailer", "upgrade"}


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
            await upstream.send(_origin_form(method, url, version, headers, host, port))
            await _forward_body(reader, upstream, headers)
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


async def _forward_body(reader: Reader, upstream: ByteStream, headers: list[tuple[str, str]]) -> None:
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

"""The SOCKS5 side of the proxy (RFC 1928): "no authentication" only, CONNECT, and UDP
ASSOCIATE when ``network.enable_socks5_udp`` is on (the association is the server's: it
owns the relays a route shares). BIND is not offered."""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Awaitable, Callable

from anyio.abc import ByteStream

from .checkpoint import Checkpoint
from .connections import Reader, connect_checked, tunnel
from .rules import Verdict

SOCKS_OK, SOCKS_NOT_ALLOWED, SOCKS_HOST_UNREACHABLE, SOCKS_REFUSED = 0x00, 0x02, 0x04, 0x05
SOCKS_BAD_COMMAND, SOCKS_BAD_ADDRESS = 0x07, 0x08

UdpAssociate = Callable[[Reader, str | None], Awaitable[None]]


async def serve(checkpoint: Checkpoint, reader: Reader, operation_id: str | None,
                udp_associate: UdpAssociate | None) -> None:
    """One SOCKS5 connection; ``udp_associate`` is None while SOCKS5 UDP is off."""
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
        await _reply(reader.stream, SOCKS_BAD_ADDRESS)
        return
    (port,) = struct.unpack("!H", await reader.exactly(2))
    if command == 0x03 and udp_associate is not None:
        await udp_associate(reader, operation_id)
        return
    if command != 0x01:  # BIND is not offered; UDP ASSOCIATE only with network.enable_socks5_udp
        reason = "socks-udp-disabled" if command == 0x03 else "socks-command"
        checkpoint.record(Verdict(False, reason), "socks5", host, port, None, operation_id)
        await _reply(reader.stream, SOCKS_BAD_COMMAND)
        return
    verdict, _, addresses = await checkpoint.judge(host, port, None, "socks5", operation_id)
    if not verdict.allowed:
        code = SOCKS_HOST_UNREACHABLE if verdict.reason == "unresolvable" else SOCKS_NOT_ALLOWED
        await _reply(reader.stream, code)
        return
    upstream = await connect_checked(addresses, port)
    if upstream is None:
        await _reply(reader.stream, SOCKS_REFUSED)
        return
    async with upstream:
        await _reply(reader.stream, SOCKS_OK)
        await tunnel(reader, upstream)


def bound_reply(host: str, port: int) -> bytes:
    """The success reply naming the (IPv4) address a UDP association was bound to."""
    return bytes([0x05, SOCKS_OK, 0x00, 0x01]) + ipaddress.IPv4Address(host).packed + struct.pack("!H", port)


async def _reply(stream: ByteStream, code: int) -> None:
    await stream.send(bytes([0x05, code, 0x00, 0x01, 0, 0, 0, 0, 0, 0]))

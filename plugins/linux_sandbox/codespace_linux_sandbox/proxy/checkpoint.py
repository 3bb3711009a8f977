"""Where every destination is judged: the domain rules, one resolution, every resolved address.

The name is resolved once here and each address it resolves to is checked; the caller
connects only to an address that was checked, so there is no second resolution for a
rebinding to slip into. The proxy's own sockets are never a destination, whatever
``allow_local_binding`` says: a command that reached the proxy through the proxy would
have its inner requests judged without its identity. Every decision is handed to an audit
sink; full URLs never are (host, port and method only).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from .rules import DomainRules, Verdict, blocked, is_this_host, normalize_host


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


class Checkpoint:
    def __init__(self, rules: DomainRules, audit: AuditSink, resolver: Resolver = system_resolver) -> None:
        self.rules = rules
        self.audit = audit
        self.resolver = resolver
        # ("tcp" | "udp", port) of the proxy's own sockets in this network namespace (the server's)
        self.own_ports: Counter[tuple[str, int]] = Counter()

    def record(self, verdict: Verdict, protocol: str, host: str, port: int, method: str | None,
               operation_id: str | None) -> None:
        self.audit(AuditEvent("allow" if verdict.allowed else "deny", verdict.reason, protocol, host, port,
                              method, operation_id, time.time()))

    async def judge(self, raw_host: str, port: int, method: str | None, protocol: str,
                    operation_id: str | None) -> tuple[Verdict, str, list[str]]:
        """Rules, then resolution once, then every resolved address."""
        host = normalize_host(raw_host)
        if host is None or not 0 < port < 65536:
            verdict = blocked("invalid-host")
            self.record(verdict, protocol, raw_host[:255], port, method, operation_id)
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
            verdict = self._check_addresses(addresses, port, protocol) if addresses else Verdict(False, "unresolvable")
        self.record(verdict, protocol, host, port, method, operation_id)
        return verdict, host, addresses

    def _check_addresses(self, addresses: list[str], port: int, protocol: str) -> Verdict:
        transport = "udp" if protocol == "socks5-udp" else "tcp"
        if (transport, port) in self.own_ports and any(is_this_host(a) for a in addresses):
            return blocked("proxy-itself")
        return self.rules.check_addresses(addresses)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True

"""Domain rules and destination checks for the egress proxy (upstream's semantics).

Patterns: ``example.com`` (exactly that host), ``*.example.com`` (subdomains only),
``**.example.com`` (the apex and subdomains), ``*`` (every host; refused by the
policy model unless ``allow_wildcard``). Deny always wins; with no allow entries
every request is blocked. Local and private destinations are blocked unless
``allow_local_binding`` — by address, so a permitted name that *resolves* to such
an address stays blocked. Limited mode allows GET, HEAD and OPTIONS only, so it
refuses tunnels (CONNECT, SOCKS5), whose requests the proxy cannot see.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

BLOCKED_NETWORKS = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
)]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def is_local_or_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None)
        if embedded is not None:
            return is_local_or_private(str(embedded))
    return any(ip in net for net in BLOCKED_NETWORKS)


def normalize_host(host: str) -> str | None:
    """Lower-cased, no trailing dot, no port or brackets, IDNA-encoded; None if unusable."""
    host = host.strip()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        host = host[1:end]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    host = host.rstrip(".").lower()
    if not host:
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    labels = host.split(".")
    if any(not label or len(label) > 63 or not all(c.isalnum() or c in "-_" for c in label) for label in labels):
        return None
    return host


def _matches(pattern: str, host: str) -> bool:
    pattern = pattern.strip().rstrip(".").lower()
    if pattern == "*":
        return True
    if pattern.startswith("**."):
        base = pattern[3:]
        return host == base or host.endswith("." + base)
    if pattern.startswith("*."):
        return host.endswith("." + pattern[2:])
    return host == (normalize_host(pattern) or pattern)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str  # allowed | denylist | allowlist | method | invalid-host | private-address
    header: str | None = None  # x-proxy-error value for a blocked HTTP request


def blocked(reason: str) -> Verdict:
    header = {"denylist": "blocked-by-denylist", "method": "blocked-by-method-policy"}.get(reason, "blocked-by-allowlist")
    return Verdict(False, reason, header)


class DomainRules:
    def __init__(self, allowed: list[str], denied: list[str], *, limited: bool = False,
                 allow_local_binding: bool = False) -> None:
        self.allowed = list(allowed)
        self.denied = list(denied)
        self.limited = limited
        self.allow_local_binding = allow_local_binding

    def check_host(self, host: str) -> Verdict:
        if any(_matches(p, host) for p in self.denied):
            return blocked("denylist")
        if not any(_matches(p, host) for p in self.allowed):
            return blocked("allowlist")
        return Verdict(True, "allowed")

    def check_method(self, method: str) -> Verdict:
        if self.limited and method.upper() not in ("GET", "HEAD", "OPTIONS"):
            return blocked("method")
        return Verdict(True, "allowed")

    def check_addresses(self, addresses: list[str]) -> Verdict:
        if not self.allow_local_binding and any(is_local_or_private(a) for a in addresses):
            return blocked("private-address")
        return Verdict(True, "allowed")

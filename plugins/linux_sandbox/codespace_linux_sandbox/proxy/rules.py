"""Domain rules and destination checks for the egress proxy (upstream's semantics).

Patterns: ``example.com`` (exactly that host), ``*.example.com`` (subdomains only),
``**.example.com`` (the apex and subdomains), ``*`` (every host; refused by the
policy model unless ``allow_wildcard``). Deny always wins; with no allow entries
every request is blocked. Local and private destinations are blocked unless
``allow_local_binding`` — by address, so a permitted name that *resolves* to such
an address stays blocked. Local means the fixed ranges and also this host's own
interface addresses (a public one too: a service bound to 0.0.0.0 answers there), read
over rtnetlink and read again when the kernel announces a change. Limited mode allows
GET, HEAD and OPTIONS only, so it refuses tunnels (CONNECT, SOCKS5), whose requests the
proxy cannot see.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import struct
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

BLOCKED_NETWORKS = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
)]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# What reaches this host whatever its interfaces: loopback, and the unspecified address
# (a connection to 0.0.0.0 or :: goes to the host itself).
THIS_HOST_NETWORKS = [ipaddress.ip_network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "::/128", "::1/128")]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _destination(address: str) -> Address:
    """The address a connection to ``address`` reaches: a v4-mapped or NAT64 address is the
    IPv4 address inside it."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_local_or_private(address: str) -> bool:
    ip = _destination(address)
    return any(ip in net for net in BLOCKED_NETWORKS) or ip in HOST_ADDRESSES.current()


def is_this_host(address: str) -> bool:
    """Whether a connection to ``address`` reaches this host (in the server's network namespace)."""
    ip = _destination(address)
    return any(ip in net for net in THIS_HOST_NETWORKS) or ip in HOST_ADDRESSES.current()


# -- this host's interface addresses (rtnetlink) ------------------------------------------------

RTM_NEWADDR, RTM_GETADDR = 20, 22
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR = 0x10, 0x100
RETRY_S = 5.0  # after rtnetlink failed, the next attempt


def read_host_addresses() -> frozenset[Address]:
    """Every address of this host's interfaces, IPv4 and IPv6 (RTM_GETADDR dump)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE) as sock:
        # nlmsghdr, then an ifaddrmsg for every family (AF_UNSPEC)
        sock.sendto(struct.pack("=IHHII", 24, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + bytes(8), (0, 0))
        found: set[Address] = set()
        while True:
            data = sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind == NLMSG_DONE:
                    return frozenset(found)
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", data, offset + 16)[0]
                    raise OSError(code, f"RTM_GETADDR: {errno.errorcode.get(code, code)}")
                if kind == RTM_NEWADDR:
                    address = _interface_address(data[offset + 24:offset + length])
                    if address is not None:
                        found.add(address)
                offset += max(16, (length + 3) & ~3)


def _interface_address(attributes: bytes) -> Address | None:
    """The host's own address in an RTM_NEWADDR's attributes: IFA_LOCAL when there is one (on a
    point-to-point link IFA_ADDRESS is the peer's), otherwise IFA_ADDRESS."""
    values: dict[int, bytes] = {}
    offset = 0
    while offset + 4 <= len(attributes):
        length, kind = struct.unpack_from("=HH", attributes, offset)
        if length < 4:
            break
        values[kind] = attributes[offset + 4:offset + length]
        offset += (length + 3) & ~3
    raw = values.get(IFA_LOCAL) or values.get(IFA_ADDRESS)
    return ipaddress.ip_address(raw) if raw is not None and len(raw) in (4, 16) else None


class HostAddresses:
    """This host's interface addresses, in the network namespace of the first question. They
    change at run time (DHCP, an interface added), so a netlink socket subscribed to address
    changes watches them and they are read again only after the kernel announced one: a
    question costs one non-blocking ``recv``. Subscribed before the first reading, so no change
    falls between the two."""

    def __init__(self) -> None:
        self._watch: socket.socket | None = None
        self._addresses: frozenset[Address] = frozenset()
        self._retry_at = 0.0
        self._lock = threading.Lock()

    def current(self) -> frozenset[Address]:
        with self._lock:
            if self._watch is not None and self._changed():
                self._read()
            if self._watch is None:
                self._open()
            return self._addresses

    def _open(self) -> None:
        if time.monotonic() < self._retry_at:
            return
        watch = None
        try:
            watch = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
            watch.bind((0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))
            self._addresses = read_host_addresses()
        except OSError as exc:
            if watch is not None:
                watch.close()
            self._retry_at = time.monotonic() + RETRY_S
            # Only the fixed ranges are refused meanwhile: refusing everything would take the
            # network from every command because of a host without rtnetlink.
            log.warning("egress proxy: cannot read this host's addresses (%s); only the fixed local and private "
                        "ranges are refused", exc)
            return
        self._watch = watch

    def _changed(self) -> bool:
        """Whether the kernel announced an address change since the last question (drained)."""
        changed = False
        while self._watch is not None:
            try:
                self._watch.recv(65536)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:  # ENOBUFS: announcements were lost, so something changed
                    log.warning("egress proxy: watching this host's addresses failed (%s)", exc)
                    self._close()  # opened again, and read, right away
                    return False
            changed = True
        return changed

    def _read(self) -> None:
        try:
            self._addresses = read_host_addresses()
        except OSError as exc:
            log.warning("egress proxy: cannot read this host's addresses again (%s)", exc)
            self._close()  # opened again (and read) on the next question

    def _close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


HOST_ADDRESSES = HostAddresses()


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
    reason: str  # allowed | denylist | allowlist | method | invalid-host | private-address | proxy-itself
    header: str | None = None  # x-proxy-error value for a blocked HTTP request


def blocked(reason: str) -> Verdict:
    header = {"denylist": "blocked-by-denylist", "method": "blocked-by-method-policy",
              "proxy-itself": "blocked-by-loop-policy"}.get(reason, "blocked-by-allowlist")
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

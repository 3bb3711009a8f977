"""The enabled-network egress proxy: domain rules, HTTP/SOCKS5 server, and the service
that runs it for a workspace (listeners per sandboxed command, audit trail)."""

from .checkpoint import AuditEvent
from .rules import DomainRules, is_local_or_private, normalize_host
from .server import EgressProxy
from .service import ProxyService

__all__ = ["AuditEvent", "DomainRules", "EgressProxy", "ProxyService", "is_local_or_private", "normalize_host"]

"""A backend's errors across the socket: raised in the worker, raised again in the server as the
same type with the same fields, so what the agent reads is byte for byte what it reads in-process.

The contract's errors (``ToolError``, ``FsError``, ``Refused``, ``BackendMissing``) travel as
``Error.data["exception"]``: type name, message, code, details, and ``errno``/``path`` or
``rule``. Anything else a backend raises is an internal error; the gateway names only its type
and message, so it comes back as an exception of a class with the same name.
"""

from __future__ import annotations

from typing import Any

from codespace.contract import BackendMissing, FsError, Refused, ToolError

from . import protocol as p

WIRE_KEY = "exception"
_CONTRACT_TYPES = {"ToolError": ToolError, "FsError": FsError, "Refused": Refused, "BackendMissing": BackendMissing}


class NotRun(Exception):
    """Raised by a worker handler that refused a request before touching anything (its own
    policy check, unreadable params): the answer says ``dispatched: false``."""

    def __init__(self, error: ToolError) -> None:
        super().__init__(error.message)
        self.error = error


def exception_to_wire(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ToolError):
        kind = next((name for name, cls in _CONTRACT_TYPES.items() if type(exc) is cls), None)
        if kind is None:  # a plugin's own subclass: its nearest contract type carries the same fields
            kind = next(name for name, cls in (("Refused", Refused), ("FsError", FsError),
                                               ("BackendMissing", BackendMissing), ("ToolError", ToolError))
                        if isinstance(exc, cls))
        wire: dict[str, Any] = {"type": kind, "message": exc.message, "code": exc.code, "details": exc.details}
        if isinstance(exc, FsError):
            wire.update(errno=exc.errno, path=exc.path)
        if isinstance(exc, Refused):
            wire["rule"] = exc.rule
        return wire
    return {"type": "internal", "name": type(exc).__name__, "message": str(exc)}


def map_error(exc: BaseException) -> p.Error | None:
    """The worker's ``errors`` mapping for :func:`service.serve_connection`."""
    dispatched = not isinstance(exc, NotRun)
    inner = exc.error if isinstance(exc, NotRun) else exc
    wire = exception_to_wire(inner)
    code = wire.get("code") or p.FAILED
    return p.Error(code=code, message=wire["message"], dispatched=dispatched, data={WIRE_KEY: wire})


def exception_from_wire(wire: dict[str, Any]) -> Exception:
    """The exception the worker raised, rebuilt; an unknown shape becomes a ToolError saying so."""
    kind = wire.get("type")
    message = str(wire.get("message", ""))
    details = wire.get("details") if isinstance(wire.get("details"), dict) else {}
    if kind == "Refused":
        return Refused(str(wire.get("rule", "")), message, details=details)
    if kind == "FsError":
        return FsError(message, path=wire.get("path"), errno=wire.get("errno"), code=wire.get("code"),
                       details=details)
    if kind in ("ToolError", "BackendMissing"):
        return _CONTRACT_TYPES[kind](message, code=wire.get("code"), details=details)
    if kind == "internal":
        name = str(wire.get("name") or "Exception")
        # Same class name, so the gateway's "internal error ... TypeName: message" reads the same.
        cls = type(name if name.isidentifier() else "Exception", (Exception,), {"__module__": "codespace_worker"})
        return cls(message)
    return ToolError(f"the worker answered with an error this server cannot read: {str(wire)[:300]}",
                     code="worker_protocol")

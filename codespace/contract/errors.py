"""Errors a backend raises for the agent to act on.

Anything else a backend raises is an internal error: the gateway logs its
traceback to stderr and tells the agent which plugin failed.
"""

from __future__ import annotations

import errno as _errno
import os

TYPE_CHECKING = False  # not typing's: the patch helper raises these, and typing costs it more than its patch
if TYPE_CHECKING:
    from typing import Any


class ToolError(Exception):
    """An expected failure, reported to the agent as a tool error.

    ``message`` says what went wrong and what to try next; ``code`` is a short
    stable name clients may branch on; ``details`` is structured context.
    """

    code = "error"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **({"details": self.details} if self.details else {})}


class FsError(ToolError):
    """A file-system failure. ``errno`` is kept so a backend's user (the patcher
    reproducing upstream messages) can tell the kind of failure apart."""

    code = "fs_error"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        errno: int | None = None,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        merged = dict(details or {})
        if path is not None:
            merged.setdefault("path", path)
        if errno is not None:
            merged.setdefault("errno", _errno.errorcode.get(errno, str(errno)))
        super().__init__(message, code=code or _code_for(errno), details=merged)
        self.path = path
        self.errno = errno

    @classmethod
    def from_os(cls, exc: OSError, path: str, action: str, hint: str = "") -> FsError:
        reason = exc.strerror or os.strerror(exc.errno or 0)
        text = f"cannot {action} {path}: {reason}"
        return cls(text + (f". {hint}" if hint else ""), path=path, errno=exc.errno)


_CODES = {
    _errno.ENOENT: "not_found",
    _errno.EEXIST: "exists",
    _errno.EISDIR: "is_directory",
    _errno.ENOTDIR: "not_a_directory",
    _errno.ENOTEMPTY: "not_empty",
    _errno.EACCES: "permission_denied",
    _errno.EPERM: "permission_denied",
    _errno.EROFS: "read_only",
    _errno.ELOOP: "symlink_refused",
    _errno.EXDEV: "escape_refused",
    _errno.ENAMETOOLONG: "name_too_long",
    _errno.EFBIG: "too_large",
    _errno.ENOSPC: "no_space",
}


def _code_for(errno: int | None) -> str:
    return _CODES.get(errno or -1, "fs_error")


class Refused(ToolError):
    """A policy refusal: the one answer to "what do I raise" for whoever enforces a rule.

    The core's policy checks return one (``PathRules.check``, ``CommandRules.check_argv``),
    the gateway raises it while preparing a call, and a backend raises it when what it
    met on its own (where a followed link led, an entry inside a tree being removed) is
    something the policy forbids. The gateway records the call as ``refused`` with
    ``rule`` (the policy key or rule name that decided) and shows ``message`` (why, and
    what to do instead) to the agent.
    """

    code = "refused"

    def __init__(self, rule: str, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details={**(details or {}), "rule": rule})
        self.rule = rule

    def __eq__(self, other: object) -> bool:
        # Policy checks compare decisions (tests, caches): same rule, same message.
        return isinstance(other, Refused) and (self.rule, self.message) == (other.rule, other.message)

    def __hash__(self) -> int:
        return hash((self.rule, self.message))

    def __repr__(self) -> str:
        return f"Refused(rule={self.rule!r}, message={self.message!r})"


class BackendMissing(ToolError):
    """No plugin provides the backend a tool needs."""

    code = "backend_missing"


class RunnerLost(ToolError):
    """The process performing a call's side effects (a worker) went away during the call.

    ``dispatched`` says whether the request had reached it: False, nothing ran and a
    retry is safe (the operation key stays free); True, it may have run, and the gateway
    records the operation ``interrupted``, as for a server that died while it ran."""

    code = "worker_lost"

    def __init__(self, message: str, *, dispatched: bool, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details={**(details or {}), "dispatched": dispatched})
        self.dispatched = dispatched

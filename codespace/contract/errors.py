"""Errors a backend raises for the agent to act on.

Anything else a backend raises is an internal error: the gateway logs its
traceback to stderr and tells the agent which plugin failed.
"""

from __future__ import annotations

import errno as _errno
import os
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
    """A policy refusal found while preparing a call (e.g. a sandbox the policy requires
    is not available). The gateway records it as ``refused`` with ``rule``."""

    code = "refused"

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message, details={"rule": rule})
        self.rule = rule


class BackendMissing(ToolError):
    """No plugin provides the backend a tool needs."""

    code = "backend_missing"

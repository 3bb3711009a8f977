"""Failures, each carrying upstream's exact message.

``message`` is what Codex 0.171.0 prints (the helper executable prints nothing
else, so the two can be compared byte for byte). ``hint`` and ``details`` are
CodeSpace's additions for an agent fixing its patch; the MCP tool shows them
after the upstream message.
"""

from __future__ import annotations

import errno as _errno
import os

TYPE_CHECKING = False  # not typing's: the helper loads this module, and typing costs it more than its patch
if TYPE_CHECKING:
    from typing import Any

VALID_HEADERS = "Valid hunk headers: '*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"
LINE_PREFIXES = "Every line should start with ' ' (context line), '+' (added line), or '-' (removed line)"
NO_FILES = "No files were modified."


class PatchError(Exception):
    code = "patch_failed"

    def __init__(
        self, message: str, *, code: str | None = None, hint: str = "", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint
        self.details = details or {}

    def agent_text(self) -> str:
        return self.message + (f"\n\n{self.hint}" if self.hint else "")


class ParseError(PatchError):
    code = "patch_invalid"

    @classmethod
    def envelope(cls, text: str) -> ParseError:
        return cls(f"Invalid patch: {text}")

    @classmethod
    def hunk(cls, line: int, text: str) -> ParseError:
        return cls(f"Invalid patch hunk on line {line}: {text}", details={"line": line})


class ApplyError(PatchError):
    """A section failed while applying (file missing, context not found...)."""


# The oracle is a static musl binary, so its io::Error texts are musl's strerror,
# which differ from glibc's (what os.strerror returns) for several errnos.
_MUSL_STRERROR = {
    _errno.EPERM: "Operation not permitted",
    _errno.ENOENT: "No such file or directory",
    _errno.EIO: "I/O error",
    _errno.ENXIO: "No such device or address",
    _errno.EBADF: "Bad file descriptor",
    _errno.EAGAIN: "Resource temporarily unavailable",
    _errno.ENOMEM: "Out of memory",
    _errno.EACCES: "Permission denied",
    _errno.EBUSY: "Resource busy",
    _errno.EEXIST: "File exists",
    _errno.EXDEV: "Cross-device link",
    _errno.ENODEV: "No such device",
    _errno.ENOTDIR: "Not a directory",
    _errno.EISDIR: "Is a directory",
    _errno.EINVAL: "Invalid argument",
    _errno.ENFILE: "Too many open files in system",
    _errno.EMFILE: "No file descriptors available",
    _errno.ETXTBSY: "Text file busy",
    _errno.EFBIG: "File too large",
    _errno.ENOSPC: "No space left on device",
    _errno.EROFS: "Read-only file system",
    _errno.EMLINK: "Too many links",
    _errno.ENAMETOOLONG: "Filename too long",
    _errno.ENOTEMPTY: "Directory not empty",
    _errno.ELOOP: "Symbolic link loop",
    _errno.EDQUOT: "Quota exceeded",
}


def rust_io_error(errno: int) -> str:
    """How Rust displays ``io::Error::from_raw_os_error(errno)`` in the static binary."""
    return f"{_MUSL_STRERROR.get(errno) or os.strerror(errno)} (os error {errno})"


def rust_utf8_error(exc: UnicodeDecodeError) -> str:
    """How Rust displays the ``Utf8Error`` for the same bytes.

    CPython's decoder reports the same maximal invalid subpart as Rust's
    ``error_len``; a sequence cut off by the end of the data is Rust's ``None``.
    """
    if exc.reason == "unexpected end of data":
        return f"incomplete utf-8 byte sequence from index {exc.start}"
    return f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"

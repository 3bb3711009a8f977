"""Agent-facing failures: what went wrong, why, and what to try next.

Every OSError a file operation meets ends up here, so the wording stays the same
across tools. Refusals (a link the kernel would not follow, an object the policy
forbids) are the contract's ``Refused``, so the gateway records them like its own.
"""

from __future__ import annotations

import errno
import os

from codespace.contract import FsError, Refused

_HINTS = {
    errno.ENOENT: "To proceed: check the path with list_dir or walk",
    errno.ENOTDIR: "A component of the path is not a directory. To proceed: check each part with stat",
    errno.EISDIR: "It is a directory. To proceed: use list_dir or walk to see what is inside",
    errno.ENOTEMPTY: "To proceed: pass recursive=true to remove the directory with its contents",
    errno.EEXIST: "To proceed: choose another name, or pass overwrite=true where the tool has it",
    errno.EACCES: "The server's user lacks permission. To proceed: ask the operator to fix the permissions",
    errno.EPERM: "To proceed: check the file's permissions and attributes (the server cannot change them)",
    errno.EROFS: "The file system is mounted read-only",
    errno.ENAMETOOLONG: "To proceed: use names up to 255 bytes and paths up to 4095",
    errno.ENOSPC: "The disk is full. To proceed: free some space and retry",
    errno.EDQUOT: "The disk quota is exhausted. To proceed: free some space and retry",
    errno.EXDEV: "Source and destination are on different file systems. To proceed: copy, then remove the original",
    errno.EBUSY: "The path is in use (for example a mount point). To proceed: leave it alone",
    errno.EINVAL: "To proceed: check the operation (for example, a directory cannot move into itself)",
    errno.EMFILE: "The server has too many files open. To proceed: retry shortly",
}


HARDLINKS_RULE = "filesystem.hardlinks"


def linked_withheld(links: int) -> str:
    """Why a file's size, mode and times are not shown (``stat``)."""
    return (f"{HARDLINKS_RULE}: it has {links} hard links, and another name of it may be a file the policy hides, so "
            "its size, mode and times are withheld as its content is (rule filesystem.hardlinks = 'refuse'). To "
            "proceed: use a copy with a single link, or ask the operator to set filesystem.hardlinks = 'allow'")


def os_error(exc: OSError, path: str, action: str) -> FsError:
    """An FsError for ``exc`` met while trying to ``action`` ``path``."""
    code = exc.errno or 0
    return FsError.from_os(exc, path, action, _HINTS.get(code, ""))


class PolicyRefused(Refused, FsError):
    """A refusal this backend met on its own: a ``Refused`` for the gateway, and an ``FsError``
    (path, errno) for the backend's own handling of failed lookups on the way."""

    def __init__(self, rule: str, message: str, *, path: str, errno_: int | None = None) -> None:
        FsError.__init__(self, message, path=path, errno=errno_, code="refused", details={"rule": rule})
        self.rule = rule


def refused(message: str, *, path: str, rule: str, errno_: int | None = None, hint: str) -> PolicyRefused:
    return PolicyRefused(rule, f"refused: {message}. To proceed: {hint}.", path=path, errno_=errno_)


def not_regular(path: str, kind: str, action: str = "read") -> FsError:
    what = {"fifo": "a FIFO (named pipe)", "socket": "a socket", "char_device": "a character device",
            "block_device": "a block device", "directory": "a directory", "symlink": "a symbolic link"}.get(kind, kind)
    hint = (
        "use list_dir or walk to see what is inside" if kind == "directory"
        else "only regular files can be read or written with the file tools"
    )
    return FsError(
        f"cannot {action} {path}: it is {what}, not a regular file. To proceed: {hint}.",
        path=path,
        errno=errno.EISDIR if kind == "directory" else None,
        code="is_directory" if kind == "directory" else "not_regular",
        details={"kind": kind},
    )


def leaf_link(path: str, target: str | None, action: str) -> FsError:
    shown = f" (to {target!r})" if target is not None else ""
    return FsError(
        f"cannot {action} {path}: it is a symbolic link{shown} and {action} does not follow a link at the end of "
        "the path. To proceed: use the link's target path, or remove the link first.",
        path=path,
        errno=errno.ELOOP,
        code="symlink_refused",
        details={"target": target} if target is not None else None,
    )


def root_refused(path: str, action: str) -> PolicyRefused:
    return PolicyRefused(
        "root",
        f"refused: cannot {action} {path}: it is the root the policy grants access under, and the tools never "
        f"{action} that itself. To proceed: {action} paths inside it.",
        path=path,
        errno_=errno.EBUSY,
    )


def safe_name(name: str) -> str:
    """A name that JSON can carry: undecodable bytes (surrogate escapes from
    ``os.fsdecode``) become ``\\xNN`` text."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def is_safe(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

"""One name in a directory fd, looked at without following it, and names joined to paths."""

from __future__ import annotations

import os

from . import errors


def lstat_at(dirfd: int, name: str, path: str, action: str = "inspect") -> os.stat_result | None:
    """``name`` in ``dirfd`` without following it; None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise errors.os_error(exc, path, action) from exc


def readlink_at(dirfd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        return None


def join(parent: str, name: str) -> str:
    return parent + name if parent.endswith("/") else f"{parent}/{name}"

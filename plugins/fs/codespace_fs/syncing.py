"""Durability after a write: the directory's fsync, or a flush deferred to the end of a batch.

A caller that writes many files (apply_patch) passes ``durable=False`` and flushes
once with :data:`pending_sync` at the end, one ``syncfs`` per device written to,
instead of an fsync per file and directory.
"""

from __future__ import annotations

import os
import stat

from . import kernel
from .roots import O_CLOEXEC


class _PendingSync:
    """Devices written to without a flush, each with one directory to syncfs() through."""

    def __init__(self) -> None:
        self._dirs: dict[int, str] = {}

    def add(self, device: int, fd: int) -> None:
        """``fd``: a directory written in, or a file written (its directory is kept)."""
        if device not in self._dirs:
            where = os.readlink(f"/proc/self/fd/{fd}")
            self._dirs[device] = where if stat.S_ISDIR(os.fstat(fd).st_mode) else os.path.dirname(where)

    def flush(self) -> None:
        dirs, self._dirs = self._dirs, {}
        for directory in dirs.values():
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | O_CLOEXEC)
            except OSError:
                os.sync()  # the directory went away: flush everything instead
                continue
            try:
                kernel.syncfs(fd)
            finally:
                os.close(fd)


pending_sync = _PendingSync()


def fsync_quietly(dirfd: int) -> None:
    try:
        os.fsync(dirfd)
    except OSError:  # pragma: no cover - some file systems refuse directory fsync
        pass

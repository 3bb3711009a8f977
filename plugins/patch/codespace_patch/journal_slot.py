"""One Patcher's journal file (its slot): created once, reused by every commit, locked
by its owner for its whole life (the protocol: :mod:`codespace_patch.journal`)."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .journal_format import SLOT_MAGIC, SLOT_SUFFIX, JournalRecord, slot_pieces

MIN_CAPACITY = 1 << 20
KEEP_CAPACITY = 16 << 20
_HANDOFF_WAIT_S = 0.005


@functools.cache
def _sealers() -> ThreadPoolExecutor:
    """Threads that seal journals: plain threads, since a seal is started from
    synchronous code and should not queue behind the event loop's worker threads."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="codespace-patch-seal")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd: int, pieces: list[bytes]) -> None:
    """Write ``pieces`` one after the other from the start of the file."""
    offset = 0
    for piece in pieces:
        view = memoryview(piece)
        while view:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]


def read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class Journal:
    """One Patcher's journal: a file reused by every commit, locked by its owner.

    Each commit writes its record over the previous one and flushes it with
    ``fdatasync``; the file's blocks were allocated (written and fsynced) when it was
    created or grown, so that flush changes no metadata and needs no commit of the file
    system's own journal — on this ext4, 0.6 ms against 1.3 ms for a new file's fsync
    (benchmarks/journal_flush.py), and the gap widens when the CPUs are busy. A record is armed until
    :meth:`disarm`; its length and CRC-32 tell a whole record from one a crash cut
    short (whose commit never touched a file)."""

    def __init__(self, journal_dir: Path) -> None:
        self.journal_dir = journal_dir
        self.path: Path | None = None
        self.fd = -1
        self.capacity = 0
        self.record: JournalRecord | None = None
        self._sealing: Future[None] | None = None

    def _reserve(self, size: int) -> None:
        """Create the file, or grow it, with allocated blocks for ``size`` bytes."""
        if self.fd < 0:
            self.journal_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            name = f"{int(time.time() * 1000):013d}-{os.getpid()}-{secrets.token_hex(4)}{SLOT_SUFFIX}"
            path = self.journal_dir / name
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                path.unlink(missing_ok=True)
                raise
            self.path, self.fd, self.capacity = path, fd, 0
        if size <= self.capacity:
            return
        capacity = max(MIN_CAPACITY, 1 << (size - 1).bit_length())
        zeros = bytes(min(capacity - self.capacity, 1 << 20))
        offset = self.capacity
        while offset < capacity:
            offset += os.pwrite(self.fd, zeros[:capacity - offset], offset)
        os.fsync(self.fd)
        fsync_dir(self.journal_dir)
        self.capacity = capacity

    def arm(self, record: JournalRecord) -> None:
        """Write ``record`` and start flushing it on a worker thread (:meth:`sealed`)."""
        pieces = slot_pieces(record)
        self._reserve(sum(map(len, pieces)))
        pwrite_all(self.fd, pieces)
        self.record = record
        self._start_sealing()

    def _start_sealing(self) -> None:
        # The caller's next work is Python (building its answer), which holds the GIL:
        # a worker that has not yet reached its fdatasync would wait for it. So wait
        # here until the worker is on its way into the flush, which releases the GIL;
        # the flush then runs alongside the caller's work instead of after it.
        entered = threading.Event()
        fd = self.fd

        def run() -> None:
            entered.set()
            os.fdatasync(fd)

        self._sealing = _sealers().submit(run)
        # Bounded: with every sealer busy (slow disk, many workspaces) the flush queues,
        # and the loop must not wait for it here.
        entered.wait(_HANDOFF_WAIT_S)

    async def sealed(self) -> None:
        """Wait for the record's flush; OSError when it failed (no file was touched)."""
        assert self._sealing is not None
        await asyncio.wrap_future(self._sealing)

    def sealed_blocking(self) -> None:
        assert self._sealing is not None
        self._sealing.result()

    def disarm(self) -> None:
        """The commit is complete or rolled back: mark the record void, durably, so no
        recovery replays it over later edits. A file grown for an unusually big patch
        shrinks back (its first blocks stay allocated)."""
        if self.fd >= 0:
            os.pwrite(self.fd, bytes(len(SLOT_MAGIC)), 0)
            os.fdatasync(self.fd)
            if self.capacity > KEEP_CAPACITY:
                os.ftruncate(self.fd, MIN_CAPACITY)
                self.capacity = MIN_CAPACITY
        self.record = None

    def keep(self) -> None:
        """Leave the record for the next recovery: close (and so unlock) the file."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def close(self) -> None:
        """No longer needed (a one-shot process): remove the file, unless its record is
        still armed (a failed flush), which stays for recovery."""
        path = self.path
        self.keep()
        if path is not None and self.record is None:
            path.unlink(missing_ok=True)

    @classmethod
    def write(cls, journal_dir: Path, record: JournalRecord) -> Journal:
        """An armed, flushed journal for ``record`` (tests, and what a commit does first)."""
        journal = cls(journal_dir)
        journal.arm(record)
        journal.sealed_blocking()
        return journal

"""Atomic mode's commit: a journal in the state directory makes a crash mid-commit
recoverable, so a patch is never left half-applied.

Protocol:

1. Before the first file is touched, a journal record is written to the
   Patcher's journal file in ``journal_dir`` (outside the workspace; plain file
   I/O is fine there): every target's old content (or "absent"), the SHA-256 of
   its new content (or "absent"), and the directories the patch creates
   (:func:`stage`). The file (``<id>.slot``) is created once per Patcher and
   reused: a record is written over the previous one, behind a head holding its
   length and CRC-32, and flushed with ``fdatasync`` by a worker thread while the
   caller builds its answer; the commit waits for that flush. The file's blocks
   were allocated when it was created (or grown), so the flush changes no metadata
   and waits for no commit of the file system's own journal. The owner holds an
   exclusive ``flock`` on the file for its whole life; the kernel drops the lock
   when the process dies, even by SIGKILL.
2. Deletions, then new directories, then writes go through the FileSystem backend.
   A file that existed is rewritten in place (same inode, no flush per file: on
   ext4 a replace by rename costs a flush each, 20-35 ms for 200 small files); a
   new file is created by an atomic replace. The commit is done: its caller answers.
3. :func:`settle` (the Patcher runs it in the background, and waits for it before
   its next apply) flushes the file system once, then voids the record (zeros over
   its head, flushed). Until then a crash, a power loss included, finds the armed
   record and completes or rolls back the commit: the patch is never half-applied,
   and at worst a power loss within that millisecond undoes a patch already
   reported, as it would drop the operation store's record of it (SQLite
   ``synchronous=NORMAL``). A record a crash cut short fails its CRC: its commit
   had not touched any file, and it is dropped.

Recovery (at server start-up, at helper start, before an atomic apply) looks at
every armed journal nobody holds a lock on (and one-shot ``.journal`` files left by
codespace-patch 0.1.1): if every target already has its new state,
the commit is complete and the journal is dropped; otherwise the commit is rolled
back to the old contents. Both are idempotent: a crash during recovery leaves a
journal that the next recovery handles the same way. A target rewritten in place
whose content is neither the old nor the new one may be torn by the crash: it is
restored, and what was found there is kept beside the journal and reported (it
may also be someone's later edit). Any other target holding a third content was
changed by someone else after the crash; it is left alone and reported.

New contents are recorded by hash only: recovery never has to write them,
because it completes only a commit whose writes all landed.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import secrets
import struct
import zlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from codespace.contract import FileSystem, FsError, ListDirRequest, RemoveRequest

from .stores import Change, make_dirs

log = logging.getLogger(__name__)

MAGIC = b"codespace-patch-journal 1\n"
SUFFIX = ".journal"  # one-shot journals (codespace-patch 0.1.1): still recovered
TMP_SUFFIX = ".tmp"
SLOT_SUFFIX = ".slot"
# An armed slot: SLOT_MAGIC, the record's length and CRC-32, then the record (a
# version-1 journal). A disarmed slot starts with zeros.
SLOT_MAGIC = b"cspjslot"
_SLOT_HEAD = struct.Struct("<8sQI4x")
_MIN_CAPACITY = 1 << 20
_KEEP_CAPACITY = 16 << 20


_HANDOFF_WAIT_S = 0.005


@functools.cache
def _sealers() -> ThreadPoolExecutor:
    """Threads that seal journals: plain threads, since a seal is started from
    synchronous code and should not queue behind the event loop's worker threads."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="codespace-patch-seal")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    path: str
    old: bytes | None
    new_sha256: str | None
    in_place: bool = False  # rewritten on its inode: a crash may leave it torn


@dataclass(slots=True)
class JournalRecord:
    entries: list[JournalEntry]
    dirs: list[str]
    created: float = 0.0
    pid: int = 0


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _encode(record: JournalRecord) -> list[bytes]:
    """The journal's bytes, as pieces: joining a big file's old content into one
    buffer would only copy it once more."""
    blobs: list[bytes] = []
    offset = 0
    entries = []
    for entry in record.entries:
        old = None
        if entry.old is not None:
            old = [offset, len(entry.old)]
            blobs.append(entry.old)
            offset += len(entry.old)
        entries.append({"path": entry.path, "old": old, "new_sha256": entry.new_sha256, "in_place": entry.in_place})
    header = json.dumps(
        {"created": record.created, "pid": record.pid, "entries": entries, "dirs": record.dirs},
        ensure_ascii=False, separators=(",", ":"),
    ).encode("utf-8", "surrogateescape")
    return [MAGIC + header + b"\n", *blobs]


def _decode(data: bytes) -> JournalRecord:
    if not data.startswith(MAGIC):
        raise ValueError("not a codespace-patch journal")
    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):end].decode("utf-8", "surrogateescape"))
    blobs = memoryview(data)[end + 1:]
    entries = []
    for item in header["entries"]:
        old = None if item["old"] is None else bytes(blobs[item["old"][0]:item["old"][0] + item["old"][1]])
        entries.append(JournalEntry(item["path"], old, item["new_sha256"], bool(item.get("in_place", False))))
    return JournalRecord(entries, list(header["dirs"]), header.get("created", 0.0), header.get("pid", 0))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        capacity = max(_MIN_CAPACITY, 1 << (size - 1).bit_length())
        zeros = bytes(min(capacity - self.capacity, 1 << 20))
        offset = self.capacity
        while offset < capacity:
            offset += os.pwrite(self.fd, zeros[:capacity - offset], offset)
        os.fsync(self.fd)
        _fsync_dir(self.journal_dir)
        self.capacity = capacity

    def arm(self, record: JournalRecord) -> None:
        """Write ``record`` and start flushing it on a worker thread (:meth:`sealed`)."""
        payload = _encode(record)
        size = sum(map(len, payload))
        crc = 0
        for piece in payload:
            crc = zlib.crc32(piece, crc)
        self._reserve(_SLOT_HEAD.size + size)
        _pwrite_all(self.fd, [_SLOT_HEAD.pack(SLOT_MAGIC, size, crc), *payload])
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
            if self.capacity > _KEEP_CAPACITY:
                os.ftruncate(self.fd, _MIN_CAPACITY)
                self.capacity = _MIN_CAPACITY
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


def _pwrite_all(fd: int, pieces: list[bytes]) -> None:
    """Write ``pieces`` one after the other from the start of the file."""
    offset = 0
    for piece in pieces:
        view = memoryview(piece)
        while view:
            written = os.pwrite(fd, view, offset)
            offset += written
            view = view[written:]


def _in_place(change: Change) -> bool:
    return change.old is not None and change.new is not None


def record_for(changes: list[Change], new_dirs: list[str]) -> JournalRecord:
    entries = [JournalEntry(c.path, c.old, None if c.new is None else _sha(c.new), _in_place(c)) for c in changes]
    return JournalRecord(entries, list(new_dirs), time.time(), os.getpid())


async def apply_changes(fs: FileSystem, changes: list[Change], new_dirs: list[str]) -> None:
    # Deletions first: a deleted file's path may become a directory of the patch.
    for change in changes:
        if change.new is None:
            await fs.delete_file(change.path)
    await make_dirs(fs, new_dirs)
    for change in changes:
        if change.new is not None:
            await fs.write_bytes(change.path, change.new, create_parents=True, follow_symlink=True, durable=False,
                                 in_place=_in_place(change))
    # No flush here: the journal (flushed before the first write) covers a crash
    # until settle() has flushed the file system once for the whole commit.


class RollbackFailed(Exception):
    pass


class JournalFailed(Exception):
    """The journal could not be made durable; no file was touched."""


@dataclass(slots=True)
class Staged:
    """A commit whose journal record is written and being flushed."""

    journal: Journal
    changes: list[Change]
    new_dirs: list[str]

    def discard(self) -> None:
        """The commit will not happen: void the record once its flush is over."""
        try:
            self.journal.sealed_blocking()
        except OSError:
            pass
        self.journal.disarm()


def stage(journal: Journal, changes: list[Change], new_dirs: list[str]) -> Staged:
    """Arm ``journal`` for ``changes`` and start flushing it; :func:`commit` next (or
    :meth:`Staged.discard`). Work done in between overlaps the disk's."""
    journal.arm(record_for(changes, new_dirs))
    return Staged(journal, changes, list(new_dirs))


async def commit(fs: FileSystem, staged: Staged, max_bytes: int) -> Journal:
    """Wait for the journal's flush and apply the changes; the record stays armed until
    :func:`settle`. On any failure the changes made so far are rolled back and the
    record voided before the error propagates."""
    journal, changes, new_dirs = staged.journal, staged.changes, staged.new_dirs
    try:
        await journal.sealed()
    except OSError as exc:
        raise JournalFailed(str(exc)) from exc
    assert journal.record is not None and journal.path is not None
    try:
        await apply_changes(fs, changes, new_dirs)
    except BaseException as exc:
        try:
            skipped = await rollback(fs, journal.record, max_bytes, journal.path)
        except Exception as again:
            journal.keep()
            raise RollbackFailed(
                f"the commit failed ({exc}) and rolling it back failed too ({again}); the journal "
                f"{journal.path} is kept and will be rolled back at the next start"
            ) from exc
        if skipped:
            log.warning("rollback left files changed by someone else: %s", ", ".join(skipped))
        try:
            journal.disarm()
        except OSError as again:  # the record stays armed: a recovery finds the files restored
            log.warning("voiding the journal record %s failed (%s)", journal.path, again)
            journal.keep()
        raise
    return journal


async def commit_once(fs: FileSystem, journal_dir: Path, changes: list[Change], new_dirs: list[str],
                      max_bytes: int) -> None:
    """A whole commit for a one-shot process (the helper, the conformance harness):
    journal, apply, flush, then the journal file is removed (kept if a record is armed)."""
    journal = Journal(journal_dir)
    try:
        await settle(fs, await commit(fs, stage(journal, changes, new_dirs), max_bytes))
    finally:
        journal.close()


async def settle(fs: FileSystem, journal: Journal | None) -> None:
    """Flush what a commit (or an upstream-mode apply) wrote, then void its journal
    record. Never raises: if a flush fails the record stays armed and the file is
    unlocked, so the next recovery completes or rolls back the commit from what the
    files hold."""
    with anyio.CancelScope(shield=True):
        try:
            await fs.sync()
            if journal is not None:
                await anyio.to_thread.run_sync(journal.disarm)
        except Exception as exc:  # noqa: BLE001 - reported, and the journal covers it
            log.warning("flushing a patch's writes failed (%s)%s", exc,
                        f"; journal {journal.path} kept for recovery" if journal is not None else "")
            if journal is not None:
                journal.keep()


# -- recovery ---------------------------------------------------------------------


async def _current(fs: FileSystem, path: str, max_bytes: int) -> bytes | None:
    """The file's content, or None when nothing is there."""
    try:
        return await fs.read_bytes(path, max_bytes=max_bytes, follow_symlink=True)
    except FsError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


async def _is_new(fs: FileSystem, entry: JournalEntry, max_bytes: int) -> bool:
    current = await _current(fs, entry.path, max_bytes)
    if entry.new_sha256 is None:
        return current is None
    return current is not None and _sha(current) == entry.new_sha256


async def _dir_exists(fs: FileSystem, path: str) -> bool:
    try:
        return await fs.kind(path) == "directory"
    except FsError:
        return False


def _keep_found(journal: Path, index: int, content: bytes) -> Path:
    """What a torn (or since edited) in-place target held, kept beside its journal."""
    kept = journal.with_name(f"{journal.name}.found-{index}")
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        _pwrite_all(fd, [content])
        os.fsync(fd)
    finally:
        os.close(fd)
    return kept


async def rollback(fs: FileSystem, record: JournalRecord, max_bytes: int, journal: Path) -> list[str]:
    """Put every target back to its old state; returns what it could not simply
    restore: targets left alone because they hold content that is neither the old
    nor the new one, and in-place targets restored from such content (kept aside)."""
    skipped: list[str] = []
    for entry in record.entries:
        if entry.old is not None:
            continue
        current = await _current(fs, entry.path, max_bytes)
        if current is None:
            continue
        if entry.new_sha256 is not None and _sha(current) == entry.new_sha256:
            await fs.delete_file(entry.path)
        else:
            skipped.append(entry.path)
    for directory in sorted(record.dirs, key=lambda d: d.count("/"), reverse=True):
        try:
            listing = await fs.list_dir(ListDirRequest(path=directory))
            if not listing.entries:
                await fs.remove(RemoveRequest(path=directory, recursive=True))
        except FsError:
            pass  # already gone, or someone put files in it: keep it
    for index, entry in enumerate(record.entries):
        if entry.old is None:
            continue
        current = await _current(fs, entry.path, max_bytes)
        if current == entry.old:
            continue
        if current is not None and (entry.new_sha256 is None or _sha(current) != entry.new_sha256):
            if not entry.in_place:
                skipped.append(entry.path)
                continue
            kept = _keep_found(journal, index, current)
            skipped.append(f"{entry.path} (restored; what it held is kept in {kept})")
        await fs.write_bytes(entry.path, entry.old, create_parents=True, follow_symlink=True, in_place=entry.in_place)
    return skipped


@dataclass(slots=True)
class Recovery:
    completed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)


def pending(journal_dir: Path) -> list[Path]:
    try:
        names = os.listdir(journal_dir)
    except (FileNotFoundError, NotADirectoryError):  # nothing to recover; a commit reports the problem
        return []
    return sorted(
        journal_dir / n for n in names
        if n.endswith((SUFFIX, TMP_SUFFIX)) or (n.endswith(SLOT_SUFFIX) and _armed(journal_dir / n))
    )


def _armed(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SLOT_MAGIC)) == SLOT_MAGIC
    except OSError:
        return False


def _slot_record(data: bytes) -> JournalRecord | None:
    """The armed record of a slot's bytes; None when it is void or was cut short (its
    commit never reached a file: files are touched only once the record is flushed)."""
    if len(data) < _SLOT_HEAD.size:
        return None
    magic, size, crc = _SLOT_HEAD.unpack_from(data)
    payload = data[_SLOT_HEAD.size:_SLOT_HEAD.size + size]
    if magic != SLOT_MAGIC or len(payload) != size or zlib.crc32(payload) != crc:
        return None
    return _decode(payload)


def remove_void_slots(journal_dir: Path) -> None:
    """Void slots whose owners are gone (a slot still locked belongs to a live Patcher):
    every server leaves its Patchers' slots behind when it stops."""
    try:
        names = os.listdir(journal_dir)
    except (FileNotFoundError, NotADirectoryError):  # nothing to recover; a commit reports the problem
        return
    for name in names:
        if name.endswith(SLOT_SUFFIX) and not _armed(journal_dir / name):
            _unlink_unlocked(journal_dir / name)


def _unlink_unlocked(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


async def recover(fs: FileSystem, journal_dir: Path, max_bytes: int) -> Recovery:
    """Finish or roll back every journal whose writer is gone."""
    outcome = Recovery()
    remove_void_slots(journal_dir)
    for path in pending(journal_dir):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # its writer finished meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    outcome.busy.append(str(path))  # a live commit in another process
                    continue
                raise
            if path.name.endswith(TMP_SUFFIX):
                # Its writer died before the journal was complete: nothing was touched.
                path.unlink(missing_ok=True)
                continue
            try:
                if path.name.endswith(SLOT_SUFFIX):
                    record = _slot_record(_read_all(fd))
                    if record is None:
                        log.warning("patch journal %s held no whole record (cut short before its "
                                    "commit touched any file); dropped", path)
                        path.unlink(missing_ok=True)
                        continue
                else:
                    record = _decode(_read_all(fd))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("patch journal %s is unreadable (%s); moved aside", path, exc)
                os.replace(path, str(path) + ".corrupt")
                outcome.failed.append(str(path))
                continue
            try:
                complete = all([await _is_new(fs, e, max_bytes) for e in record.entries]) and all(
                    [await _dir_exists(fs, d) for d in record.dirs]
                )
                if complete:
                    outcome.completed.append(str(path))
                else:
                    outcome.skipped_files += await rollback(fs, record, max_bytes, path)
                    outcome.rolled_back.append(str(path))
            except Exception as exc:  # noqa: BLE001 - keep the journal for the next attempt
                log.error("patch journal %s: recovery failed: %s", path, exc)
                outcome.failed.append(str(path))
                continue
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return outcome


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def describe(outcome: Recovery) -> str:
    parts = []
    if outcome.rolled_back:
        parts.append(f"rolled back {len(outcome.rolled_back)} interrupted patch commit(s)")
    if outcome.completed:
        parts.append(f"completed {len(outcome.completed)} interrupted patch commit(s)")
    if outcome.skipped_files:
        parts.append("left alone (changed since): " + ", ".join(outcome.skipped_files))
    if outcome.failed:
        parts.append("could not recover: " + ", ".join(outcome.failed))
    return "; ".join(parts)



"""Putting a journal's targets back to their old contents: after a commit failed
midway, and in recovery after a crash (the protocol: :mod:`codespace_patch.journal`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from codespace.contract import FileSystem, FsError, ListDirRequest, RemoveRequest

from .journal_format import JournalRecord, sha256_hex
from .journal_slot import pwrite_all


async def current_content(fs: FileSystem, path: str, max_bytes: int) -> bytes | None:
    """The file's content, or None when nothing is there."""
    try:
        return await fs.read_bytes(path, max_bytes=max_bytes, follow_symlink=True)
    except FsError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def _keep_found(journal: Path, index: int, content: bytes) -> Path:
    """What a torn (or since edited) in-place target held, kept beside its journal."""
    kept = journal.with_name(f"{journal.name}.found-{index}")
    # A new file, never through what lies there: the journal's directory may be one the caller
    # chose, and a link planted under this name once took these bytes anywhere.
    try:
        kept.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        pwrite_all(fd, [content])
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
        current = await current_content(fs, entry.path, max_bytes)
        if current is None:
            continue
        if entry.new_sha256 is not None and sha256_hex(current) == entry.new_sha256:
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
        current = await current_content(fs, entry.path, max_bytes)
        if current == entry.old:
            continue
        if current is None and entry.new_sha256 is not None:
            # An update never leaves its file absent (a replace renames over it): someone else
            # removed it, maybe with its directory. Not brought back (found by testing).
            skipped.append(f"{entry.path} (removed meanwhile; not brought back)")
            continue
        if current is not None and (entry.new_sha256 is None or sha256_hex(current) != entry.new_sha256):
            if not entry.in_place:
                skipped.append(entry.path)
                continue
            kept = _keep_found(journal, index, current)
            skipped.append(f"{entry.path} (restored; what it held is kept in {kept})")
        await fs.write_bytes(entry.path, entry.old, create_parents=True, follow_symlink=True, in_place=entry.in_place)
    return skipped

"""Committing a set of changes under the journal: stage the record, apply the
changes once it is durable, settle (flush, then void the record); a failure on the
way is rolled back (the protocol: :mod:`codespace_patch.journal`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from codespace.contract import FileSystem, ToolError

from .journal_format import JournalEntry, JournalRecord, sha256_hex
from .journal_rollback import rollback
from .journal_slot import Journal
from .stores import Change, make_dirs

log = logging.getLogger(__name__)


class RollbackFailed(Exception):
    pass


class JournalFailed(Exception):
    """The journal could not be made durable; no file was touched."""


def _in_place(change: Change) -> bool:
    return change.old is not None and change.new is not None


def record_for(changes: list[Change], new_dirs: list[str]) -> JournalRecord:
    entries = [JournalEntry(c.path, c.old, None if c.new is None else sha256_hex(c.new), _in_place(c))
               for c in changes]
    return JournalRecord(entries, list(new_dirs), time.time(), os.getpid())


_PARENTS = "Failed to create parent directories for"


async def apply_changes(fs: FileSystem, changes: list[Change], new_dirs: list[str],
                        moved_from: Collection[str] = ()) -> None:
    # What upstream says when the step in hand fails, and the path it names: a failure carries it
    # as upstream_message (found by testing from outside: atomic mode's commit failures had none).
    step = ("", "")
    try:
        # Deletions first: a deleted file's path may become a directory of the patch.
        for change in changes:
            if change.new is None:
                step = ("Failed to remove original" if change.path in moved_from else "Failed to delete file",
                        change.path)
                await fs.delete_file(change.path)
        for directory in new_dirs:
            step = (_PARENTS, directory)
            await make_dirs(fs, [directory])
        for change in changes:
            if change.new is not None:
                step = ("Failed to write file", change.path)
                # Only a new file's directories are made: an updated file whose directory went away
                # meanwhile (a command removed it) fails the commit, which is rolled back, rather than
                # being written back with its directory re-created (found by testing).
                await fs.write_bytes(change.path, change.new, create_parents=change.old is None, follow_symlink=True,
                                     durable=False, in_place=_in_place(change))
    except ToolError as exc:
        what, path = step
        if what == _PARENTS:  # upstream names the file it was making the directory for
            path = next((c.path for c in changes if c.path.startswith(path.rstrip("/") + "/")), path)
        exc.details.setdefault("upstream_message", f"{what} {path}")
        raise
    # No flush here: the journal (flushed before the first write) covers a crash
    # until settle() has flushed the file system once for the whole commit.


@dataclass(slots=True)
class Staged:
    """A commit whose journal record is written and being flushed."""

    journal: Journal
    changes: list[Change]
    new_dirs: list[str]
    moved_from: Collection[str] = field(default=())

    def discard(self) -> None:
        """The commit will not happen: void the record once its flush is over."""
        try:
            self.journal.sealed_blocking()
        except OSError:
            pass
        self.journal.disarm()


def stage(journal: Journal, changes: list[Change], new_dirs: list[str], moved_from: Collection[str] = ()) -> Staged:
    """Arm ``journal`` for ``changes`` and start flushing it; :func:`commit` next (or
    :meth:`Staged.discard`). Work done in between overlaps the disk's. ``moved_from``: the
    deletions that are a Move's original (upstream names their failure apart)."""
    journal.arm(record_for(changes, new_dirs))
    return Staged(journal, changes, list(new_dirs), moved_from)


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
        await apply_changes(fs, changes, new_dirs, staged.moved_from)
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
                      max_bytes: int, moved_from: Collection[str] = ()) -> None:
    """A whole commit for a one-shot process (the helper, the conformance harness):
    journal, apply, flush, then the journal file is removed (kept if a record is armed)."""
    journal = Journal(journal_dir)
    try:
        await settle(fs, await commit(fs, stage(journal, changes, new_dirs, moved_from), max_bytes))
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

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

Where the parts live: the record and its bytes, :mod:`.journal_format`; the slot
file a Patcher reuses, :mod:`.journal_slot`; staging, committing and settling,
:mod:`.journal_commit`; restoring old contents, :mod:`.journal_rollback`; recovery
after a crash and the journal directory's housekeeping, :mod:`.journal_recovery`.
This module names them in one place for the helper, the conformance harness and
the tests.
"""

from __future__ import annotations

from .journal_commit import (
    JournalFailed, RollbackFailed, Staged, apply_changes, commit, commit_once, record_for, settle, stage,
)
from .journal_format import JournalEntry, JournalRecord
from .journal_recovery import Recovery, describe, pending, recover, remove_void_slots
from .journal_rollback import rollback
from .journal_slot import Journal

# Read by the tests that cut a slot's record short and watch a grown slot shrink back.
from .journal_format import SLOT_HEAD as _SLOT_HEAD
from .journal_slot import MIN_CAPACITY as _MIN_CAPACITY

__all__ = [
    "Journal", "JournalEntry", "JournalFailed", "JournalRecord", "Recovery", "RollbackFailed", "Staged",
    "apply_changes", "commit", "commit_once", "describe", "pending", "record_for", "recover", "remove_void_slots",
    "rollback", "settle", "stage",
]

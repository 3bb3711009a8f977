"""After a crash: finish or roll back every armed journal nobody holds a lock on, and
remove the void slots stopped servers left (the protocol: :mod:`codespace_patch.journal`)."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from codespace.contract import FileSystem, FsError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from codespace.contract import PathRules

from .journal_format import (
    SLOT_MAGIC,
    SLOT_SUFFIX,
    SUFFIX,
    TMP_SUFFIX,
    JournalEntry,
    JournalRecord,
    decode,
    sha256_hex,
    slot_record,
)
from .journal_rollback import current_content, rollback
from .journal_slot import read_all

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovery:
    completed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)


# -- which files need recovery, which can go ----------------------------------------


def pending(journal_dir: Path) -> list[Path]:
    try:
        names = os.listdir(journal_dir)
    except (FileNotFoundError, NotADirectoryError):  # nothing to recover; a commit reports the problem
        return []
    return sorted(
        journal_dir / n for n in names
        if n.endswith((SUFFIX, TMP_SUFFIX)) or (n.endswith(SLOT_SUFFIX) and _armed(journal_dir / n))
    )


# A journal directory may be one the caller chose (CODESPACE_STATE_DIR), where anyone who can
# write it may plant a link or a FIFO under a journal's name: its files are opened without
# following a link and without blocking, and only a regular file is read.
_OPEN_JOURNAL = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_regular(path: Path, flags: int) -> int | None:
    """A descriptor of the regular file at ``path`` (no link followed), or None."""
    try:
        fd = os.open(path, flags | _OPEN_JOURNAL)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def _armed(path: Path) -> bool:
    fd = _open_regular(path, os.O_RDONLY)
    if fd is None:
        return False
    try:
        return os.read(fd, len(SLOT_MAGIC)) == SLOT_MAGIC
    finally:
        os.close(fd)


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
    fd = _open_regular(path, os.O_RDONLY)
    if fd is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


# -- finishing or rolling back ------------------------------------------------------


async def _is_new(fs: FileSystem, entry: JournalEntry, max_bytes: int) -> bool:
    current = await current_content(fs, entry.path, max_bytes)
    if entry.new_sha256 is None:
        return current is None
    return current is not None and sha256_hex(current) == entry.new_sha256


async def _dir_exists(fs: FileSystem, path: str) -> bool:
    try:
        return await fs.kind(path) == "directory"
    except FsError:
        return False


def _refusal(record: JournalRecord, rules: PathRules) -> str | None:
    """Why the policy would not let a patch write every path ``record`` names, or None. A
    journal is input: whoever chose the helper's state directory (``CODESPACE_STATE_DIR``
    can point into the workspace) could have written it, and recovery writes, creates and
    deletes the paths it names. Judged as the gateway judges a patch's targets, a genuine
    journal passes (its paths were a patch's targets); a forged one gets no more than a
    patch would."""
    from codespace.contract.gate import path_syntax_refusal, paths_refusal

    paths = [*(entry.path for entry in record.entries), *record.dirs]
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path:
            return f"{path!r} is not an absolute, normalised path"
        refused = path_syntax_refusal(path)
        if refused is not None:
            return refused.message
    refused = paths_refusal(rules, write=paths)
    return None if refused is None else refused.message


async def recover(fs: FileSystem, journal_dir: Path, max_bytes: int, rules: PathRules | None = None) -> Recovery:
    """Finish or roll back every journal whose writer is gone. ``rules``: the workspace's path
    rules, which every path a journal names must pass for writing (else it is moved aside,
    untouched); None only where no one but the server can write ``journal_dir``."""
    outcome = Recovery()
    remove_void_slots(journal_dir)
    for path in pending(journal_dir):
        fd = _open_regular(path, os.O_RDWR)
        if fd is None:
            if os.path.lexists(path):  # else its writer finished meanwhile
                log.error("patch journal %s is not a regular file (a link, a FIFO...); left alone", path)
                outcome.failed.append(f"{path} (not a regular file)")
            continue
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
                    record = slot_record(read_all(fd))
                    if record is None:
                        log.warning("patch journal %s held no whole record (cut short before its "
                                    "commit touched any file); dropped", path)
                        path.unlink(missing_ok=True)
                        continue
                else:
                    record = decode(read_all(fd))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("patch journal %s is unreadable (%s); moved aside", path, exc)
                os.replace(path, str(path) + ".corrupt")
                outcome.failed.append(str(path))
                continue
            refused = None if rules is None else _refusal(record, rules)
            if refused is not None:
                log.error("patch journal %s names a path no patch may write here (%s); moved aside, nothing "
                          "touched", path, refused)
                os.replace(path, str(path) + ".refused")
                outcome.failed.append(f"{path} (refused: {refused})")
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

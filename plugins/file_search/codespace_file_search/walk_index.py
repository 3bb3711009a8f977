"""A kept walk per search root, reused until inotify reports a change that could alter it.

Why kept: re-walking a 100,000-entry tree costs Python about as long as the whole of
upstream's search (its walker is parallel Rust); a kept walk answers from memory. Why it
stays correct: every directory the walk reads is watched (through its open descriptor,
``/proc/self/fd/N``, so a directory renamed mid-walk is still the one watched) *before* it
is listed, so any entry created, removed, renamed or re-permissioned after that shows up
as an event; so do writes to ``.gitignore``/``.ignore``, a ``.git`` appearing or leaving
in an ancestor of the root, and the target of a link (or, for a dangling link, the
directory its target would appear in). Each watch knows the directories it hears, so an
event in a walked directory is mended there (``walk_repair``: that directory listed again,
or walked again when how it is read changed); an event about a link's target, a ``.git``
above the root, the root itself or a lost event queue drops the kept walk and the next call
walks again. Walks that were truncated or cancelled are never kept, nor are walks of a policy
other than the one the call brings (the key holds the rules), and when the watch limit is
reached the walk is simply not kept.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections import OrderedDict

from .walk import Bounds, Walked, walk
from .walk_repair import repair

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x400, 0x800, 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_MASK_ADD = 0x01000000, 0x20000000
_ENTRIES = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB
_DIR_MASK = _ENTRIES | IN_MODIFY | IN_CLOSE_WRITE
_SELF_MASK = IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB
_IGNORE_FILES = {b".gitignore", b".ignore"}
_EVENT = struct.Struct("iIII")
KEPT_ROOTS = 4

_libc = ctypes.CDLL(None, use_errno=True)


class _Watcher:
    """One inotify instance: the watches of one kept walk, and what changed since."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.usable = self.fd >= 0
        self.ancestors: set[int] = set()
        self.dirs: dict[int, set[str]] = {}
        """Watch -> the walked directories (relative) it hears: one directory reached by its
        path and through a link is one watch."""
        self.wd_of: dict[str, int] = {}
        self.links: dict[int, set[bytes]] = {}
        """Watches of link targets (b'': any event on the target itself) and of the directories
        they live in (the target's name): such an event walks again."""

    def _add(self, path: str, mask: int) -> int:
        if not self.usable:
            return -1
        # IN_MASK_ADD: one directory may be watched as an ancestor, as walked and as a
        # link's parent at once (inotify gives it one descriptor); its masks add up.
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), mask | IN_MASK_ADD)
        if wd < 0:
            self.usable = False  # the watch limit (or a vanished path): this walk is not kept
        return wd

    def directory(self, fd: int, rel: str) -> None:
        wd = self._add(f"/proc/self/fd/{fd}", _DIR_MASK | IN_ONLYDIR)
        if wd >= 0:
            self.dirs.setdefault(wd, set()).add(rel)
            self.wd_of[rel] = wd

    def forget(self, rel: str) -> None:
        """``rel`` is no longer part of the walk: its watch goes when nothing else needs it."""
        wd = self.wd_of.pop(rel, None)
        if wd is None:
            return
        rels = self.dirs.get(wd, set())
        rels.discard(rel)
        if not rels:
            self.dirs.pop(wd, None)
            if wd not in self.links and wd not in self.ancestors and self.fd >= 0:
                _libc.inotify_rm_watch(self.fd, wd)

    def link(self, target: str) -> None:
        if os.path.lexists(target):
            self.links.setdefault(self._add(target, _SELF_MASK), set()).add(b"")
        parent = os.path.dirname(target)
        if os.path.isdir(parent):
            self.links.setdefault(self._add(parent, _ENTRIES | IN_ONLYDIR), set()).add(
                os.fsencode(os.path.basename(target)))
        else:
            self.usable = False  # nowhere to hear the target appear

    def ancestors_of(self, root: str) -> None:
        path = os.path.dirname(root.rstrip("/"))
        while True:
            wd = self._add(path or "/", IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR)
            self.ancestors.add(wd)
            if not path or path == "/":
                return
            path = os.path.dirname(path)

    def changes(self) -> Changes | None:
        """What pending events say changed (the queue is drained): None for nothing that could
        change the walk, ``ALL`` to walk again, else the directories to list or walk again."""
        found = Changes()
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                return ALL
            if not data:
                break
            if not self._judge(data, found):
                return ALL
        return found if (found.relist or found.rewalk) else None

    def _judge(self, data: bytes, found: Changes) -> bool:
        """Add what ``data``'s events change to ``found``; False: only a new walk will do."""
        at = 0
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size: at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            if mask & IN_Q_OVERFLOW:
                return False
            if mask & IN_IGNORED:
                continue
            rels = self.dirs.get(wd)
            quiet = mask & (IN_MODIFY | IN_CLOSE_WRITE) and name not in _IGNORE_FILES
            if not quiet and name in self.links.get(wd, ()):
                return False  # a link's target (or the target itself) changed
            if rels is None:
                if wd in self.ancestors:
                    if name == b".git":
                        return False
                    continue
                if wd in self.links:
                    continue
                return False  # a watch this walk does not know: be safe
            if not _sort_event(mask, name, rels, found):
                return False
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Changes:
    """Directories (relative) to list again alone, and to walk again whole."""

    def __init__(self) -> None:
        self.relist: set[str] = set()
        self.rewalk: set[str] = set()


ALL = Changes()
"""Walk everything again."""


def _sort_event(mask: int, name: bytes, rels: set[str], found: Changes) -> bool:
    """One event in a walked directory: which kind of mending it needs; False: walk again."""
    if mask & (IN_MODIFY | IN_CLOSE_WRITE):
        if name in _IGNORE_FILES:
            found.rewalk |= rels  # how the directory is read changed
        return True
    if mask & IN_ATTRIB:
        if not name or name in _IGNORE_FILES:
            found.rewalk |= rels  # the directory's own mode, or an ignore file's
        elif mask & IN_ISDIR:
            child = os.fsdecode(name)
            found.rewalk |= {f"{rel}/{child}" if rel else child for rel in rels}
        return True
    if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
        return "" not in rels  # the root itself; elsewhere the parent's event says it
    if name in _IGNORE_FILES or name == b".git":
        found.rewalk |= rels
    else:
        found.relist |= rels
    return True


class WalkIndex:
    """Kept walks by (root, bounds, policy), the most recently used few."""

    def __init__(self, keep: int = KEPT_ROOTS) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, tuple[Walked, _Watcher]] = OrderedDict()
        self._busy: dict[tuple, threading.Event] = {}
        """Keys being walked or mended, each with the event set when that is over: a second
        call for the same key waits and takes the result from memory instead of walking the
        tree a second time at once (a search arriving during the warm-up walk, ``warm_up``)."""

    def walk(self, root_real: str, rules=None, bounds: Bounds | None = None,  # noqa: ANN001 - codespace PathRules
             cancel: threading.Event | None = None, then=None) -> tuple[Walked, bool]:  # noqa: ANN001
        """The walk of ``root_real`` and whether it came from memory; ``then(walked)``, if
        given, runs on a whole walk before a caller waiting for this root is let in (the
        warm-up builds the ranking's buffer there, so a waiting search does not build it too)."""
        bounds = bounds or Bounds()
        key = (root_real, bounds.entries, bounds.dirs, bounds.depth, bounds.refuse_hardlinks, _fingerprint(rules))
        while True:
            with self._lock:
                busy = self._busy.get(key)
                if busy is None:
                    mine = self._busy[key] = threading.Event()
                    break
            while not busy.wait(0.05):
                if cancel is not None and cancel.is_set():
                    return Walked(cancelled=True), False
        try:
            walked, kept = self._walk(key, root_real, rules, bounds, cancel)
            if then is not None and not walked.cancelled and walked.truncated is None:
                then(walked)
            return walked, kept
        finally:
            with self._lock:
                del self._busy[key]
            mine.set()

    def _walk(self, key: tuple, root_real: str, rules, bounds: Bounds,  # noqa: ANN001 - codespace PathRules
              cancel: threading.Event | None) -> tuple[Walked, bool]:
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is not None:
            walked, watcher = kept
            change = watcher.changes()
            if change is None:
                with self._lock:
                    self._store(key, kept)
                return walked, True
            if change is not ALL:
                mended = repair(walked, change.relist, change.rewalk, root_real, rules, bounds, cancel, watcher)
                if mended is not None:
                    if watcher.usable and watcher.changes() is None:
                        with self._lock:
                            self._store(key, (mended, watcher))
                    else:
                        watcher.close()
                    return mended, False
            watcher.close()
        watcher = _Watcher()
        watcher.ancestors_of(root_real)
        walked = walk(root_real, rules, bounds, cancel, watch=watcher)
        if walked.truncated is None and watcher.usable and watcher.changes() is None:
            with self._lock:
                self._store(key, (walked, watcher))
        else:
            watcher.close()
        return walked, False

    def _store(self, key: tuple, kept: tuple[Walked, _Watcher]) -> None:
        old = self._kept.pop(key, None)
        if old is not None and old[1] is not kept[1]:
            old[1].close()
        self._kept[key] = kept
        while len(self._kept) > self._keep:
            _, (_, watcher) = self._kept.popitem(last=False)
            watcher.close()

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        with self._lock:
            for _, watcher in self._kept.values():
                watcher.close()
            self._kept.clear()


def _fingerprint(rules) -> tuple:  # noqa: ANN001
    if rules is None:
        return ()
    return (tuple((r.path, r.access) for r in rules.rules), tuple(sorted(rules.protected_names)),
            repr(rules.protected_anchored))


INDEX = WalkIndex()

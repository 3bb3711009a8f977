"""A kept walk per search root, reused until inotify reports a change that could alter it.

Why kept: re-walking a 100,000-entry tree costs Python about as long as the whole of
upstream's search (its walker is parallel Rust); a kept walk answers from memory. Why it
stays correct: every directory the walk reads is watched (through its open descriptor,
``/proc/self/fd/N``, so a directory renamed mid-walk is still the one watched) *before* it
is listed, so any entry created, removed, renamed or re-permissioned after that shows up
as an event; so do writes to ``.gitignore``/``.ignore``, a ``.git`` appearing or leaving
in an ancestor of the root, and the target of a link (or, for a dangling link, the
directory its target would appear in). Any such event, or a lost event queue, drops the
kept walk and the next call walks again. Walks that were truncated or cancelled are never
kept, nor are walks of a policy other than the one the call brings (the key holds the
rules), and when the watch limit is reached the walk is simply not kept.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from collections import OrderedDict

from .walk import Bounds, Walked, walk

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
    """One inotify instance: the watches of one kept walk, and whether anything changed."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.usable = self.fd >= 0
        self.ancestors: set[int] = set()
        self.watched: set[int] = set()
        """Watches where any entry event counts (an ancestor watch only hears of ``.git``)."""

    def _add(self, path: str, mask: int) -> int:
        if not self.usable:
            return -1
        # IN_MASK_ADD: one directory may be watched as an ancestor, as walked and as a
        # link's parent at once (inotify gives it one descriptor); its masks add up.
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), mask | IN_MASK_ADD)
        if wd < 0:
            self.usable = False  # the watch limit (or a vanished path): this walk is not kept
        return wd

    def directory(self, fd: int) -> None:
        self.watched.add(self._add(f"/proc/self/fd/{fd}", _DIR_MASK | IN_ONLYDIR))

    def link(self, target: str) -> None:
        if os.path.lexists(target):
            self.watched.add(self._add(target, _SELF_MASK))
        parent = os.path.dirname(target)
        if os.path.isdir(parent):
            self.watched.add(self._add(parent, _ENTRIES | IN_ONLYDIR))
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

    def changed(self) -> bool:
        """Whether any pending event could change the walk (the queue is drained)."""
        dirty = False
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return dirty
            except OSError:
                return True
            if not data:
                return dirty
            dirty = self._judge(data) or dirty

    def _judge(self, data: bytes) -> bool:
        at = 0
        dirty = False
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size: at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            if mask & IN_Q_OVERFLOW:
                return True
            if mask & IN_IGNORED:
                continue
            if wd in self.ancestors and wd not in self.watched:
                dirty = dirty or name == b".git"
            elif mask & (IN_MODIFY | IN_CLOSE_WRITE):
                dirty = dirty or name in _IGNORE_FILES
            elif mask & IN_ATTRIB:
                dirty = dirty or not name or bool(mask & IN_ISDIR) or name in _IGNORE_FILES
            else:
                dirty = True
        return dirty

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class WalkIndex:
    """Kept walks by (root, bounds, policy), the most recently used few."""

    def __init__(self, keep: int = KEPT_ROOTS) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, tuple[Walked, _Watcher]] = OrderedDict()

    def walk(self, root_real: str, rules=None, bounds: Bounds | None = None,  # noqa: ANN001 - codespace PathRules
             cancel: threading.Event | None = None) -> tuple[Walked, bool]:
        """The walk of ``root_real`` and whether it came from memory."""
        bounds = bounds or Bounds()
        key = (root_real, bounds.entries, bounds.dirs, bounds.depth, _fingerprint(rules))
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is not None:
            walked, watcher = kept
            if not watcher.changed():
                with self._lock:
                    self._store(key, kept)
                return walked, True
            watcher.close()
        watcher = _Watcher()
        watcher.ancestors_of(root_real)
        walked = walk(root_real, rules, bounds, cancel, watch=watcher)
        if walked.truncated is None and watcher.usable and not watcher.changed():
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

"""Protected names below the top of each writable root (``sub/.git``, ``a/b/.codex``).

The core protects names such as ``.git`` at any depth (the file tools refuse
``sub/.git/config``), while its layout lists only each writable root's own
``<root>/<name>``. Those below are found here, by a walk of the writable roots, and added to
the protected paths the engines enforce: bubblewrap binds each read-only, Landlock keeps
each out of the writable grant. A name that does not exist yet cannot be held back below the
top level by either engine (a mount needs an existing mount point; Landlock cannot take a
right away inside a granted directory): :mod:`.limits` says so.

Cost: the walk reads every directory of the tree (about 0.25 s for 20,000 directories on
the test machine, most of it in the kernel). It is done again for every command while it
stays under :data:`SYNC_BUDGET_S`; a tree whose walk took longer is served from the last
walk and walked again in the background, one walk per root at a time, so a command never
waits for more than one budget. A walk stops after :data:`MAX_DIRS` directories. It follows
no symbolic link, does not descend into what it finds (a protected directory is read-only
as a whole) nor into deny-read paths (hidden anyway).
"""

from __future__ import annotations

import os
import threading
import time

SYNC_BUDGET_S = 0.02
MAX_DIRS = 500_000


def walk(root: str, names: frozenset[str], prune: frozenset[str]) -> tuple[list[str], float, bool]:
    """(protected paths strictly below ``root``'s top level, seconds taken, whether MAX_DIRS cut it short)."""
    started = time.monotonic()
    found: list[str] = []
    stack = [root]
    seen = 0
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.name in names:
                    if directory != root:  # the top level is in the core's layout already
                        found.append(entry.path)
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir and entry.path not in prune:
                    seen += 1
                    if seen > MAX_DIRS:
                        return sorted(found), time.monotonic() - started, True
                    stack.append(entry.path)
    return sorted(found), time.monotonic() - started, False


class ProtectedScan:
    """The last walk of each writable root, and the rule for when to walk again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple, tuple[list[str], float, bool]] = {}
        self._walking: set[tuple] = set()

    def below(self, writable: list[str], names: list[str], deny_read: list[str]) -> list[str]:
        """Existing protected names below the top of each writable root ("/" is not walked)."""
        if not names:
            return []
        key_names, prune = frozenset(names), frozenset(deny_read)
        out: set[str] = set()
        for root in writable:
            if root == "/" or not os.path.isdir(root):
                continue
            out.update(self._for_root((root, key_names, prune)))
        return sorted(out)

    def truncated(self) -> list[str]:
        """Roots whose last walk stopped at MAX_DIRS."""
        with self._lock:
            return sorted({key[0] for key, (_, _, cut) in self._last.items() if cut})

    def _for_root(self, key: tuple) -> list[str]:
        with self._lock:
            last = self._last.get(key)
            background = last is not None and last[1] > SYNC_BUDGET_S
            if background and key not in self._walking:
                self._walking.add(key)
                threading.Thread(target=self._refresh, args=(key,), daemon=True,
                                 name="codespace-protected-scan").start()
        if background:
            return last[0]
        result = walk(*key)
        with self._lock:
            self._last[key] = result
        return result[0]

    def _refresh(self, key: tuple) -> None:
        try:
            result = walk(*key)
            with self._lock:
                self._last[key] = result
        finally:
            with self._lock:
                self._walking.discard(key)

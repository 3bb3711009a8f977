"""Protected names below the top of each writable root (``sub/.git``, ``a/b/.codex``).

Runs in the server.

The core protects names such as ``.git`` at any depth (the file tools refuse
``sub/.git/config``), while its layout lists only each writable root's own
``<root>/<name>``. Those below are found here, by a walk of the writable roots, and added to
the protected paths the engines enforce: bubblewrap binds each read-only, Landlock keeps
each out of the writable grant. A name that does not exist yet cannot be held back below the
top level by either engine (a mount needs an existing mount point; Landlock cannot take a
right away inside a granted directory): :mod:`.limits` says so.

Cost: the walk reads every directory of the tree (about 0.25 s for 20,000 directories on
the test machine, most of it in the kernel). The server walks each writable root once at
start-up (a service); a command waits for a root's first walk at most :data:`FIRST_WALK_S`
(the rest goes on in the background, and ``cannot_enforce`` says so meanwhile). A root is
walked again for every command while its walk stays under :data:`SYNC_BUDGET_S`; one whose
walk took longer is served from the last walk and walked again in the background, one walk
per root at a time. A walk stops after :data:`MAX_DIRS` directories. It follows
no symbolic link, does not descend into what it finds (a protected directory is read-only
as a whole) nor into deny-read paths (hidden anyway).
"""

from __future__ import annotations

import os
import threading
import time

SYNC_BUDGET_S = 0.02
FIRST_WALK_S = 1.0  # a command never waits longer for a root's first walk (the server starts one at start-up)
MAX_DIRS = 500_000


def walk(root: str, names: frozenset[str], prune: frozenset[str],
         limit_s: float | None = None) -> tuple[list[str], float, bool]:
    """(protected paths strictly below ``root``'s top level, seconds taken, whether it stopped short:
    at MAX_DIRS, or after ``limit_s``)."""
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
                    if seen > MAX_DIRS or (limit_s is not None and not seen % 256
                                           and time.monotonic() - started > limit_s):
                        return sorted(found), time.monotonic() - started, True
                    stack.append(entry.path)
    return sorted(found), time.monotonic() - started, False


class ProtectedScan:
    """The last walk of each writable root, and the rule for when to walk again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple, tuple[list[str], float, bool]] = {}
        self._walking: set[tuple] = set()

    def below(self, writable: list[str], names: list[str], deny_read: list[str], *, wait: bool = False) -> list[str]:
        """Existing protected names below the top of each writable root ("/" is not walked);
        ``wait``: a root's first walk runs to its end (else FIRST_WALK_S, then in the background)."""
        if not names:
            return []
        key_names, prune = frozenset(names), frozenset(deny_read)
        out: set[str] = set()
        for root in writable:
            if root == "/" or not os.path.isdir(root):
                continue
            out.update(self._for_root((root, key_names, prune), None if wait else FIRST_WALK_S))
        return sorted(out)

    def truncated(self) -> list[str]:
        """Roots whose last walk stopped short (MAX_DIRS, or a first walk still going on)."""
        with self._lock:
            return sorted({key[0] for key, (_, _, cut) in self._last.items() if cut})

    def _for_root(self, key: tuple, first_limit_s: float | None) -> list[str]:
        with self._lock:
            last = self._last.get(key)
            background = last is not None and last[1] > SYNC_BUDGET_S
            if background:
                self._refresh_soon(key)
        if background:
            return last[0]
        limit = first_limit_s if last is None else None
        result = walk(*key, limit_s=limit)
        with self._lock:
            self._last[key] = result
            if limit is not None and result[2] and result[1] >= limit:
                self._refresh_soon(key)  # cut short by time: the whole walk goes on in the background
        return result[0]

    def _refresh_soon(self, key: tuple) -> None:
        """With the lock held: one background walk of ``key`` at a time."""
        if key not in self._walking:
            self._walking.add(key)
            threading.Thread(target=self._refresh, args=(key,), daemon=True, name="codespace-protected-scan").start()

    def _refresh(self, key: tuple) -> None:
        try:
            result = walk(*key)
            with self._lock:
                self._last[key] = result
        finally:
            with self._lock:
                self._walking.discard(key)

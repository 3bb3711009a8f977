"""The best matches of a query among walked entries, ordered as Codex orders them.

Each path is first tested cheaply (a compiled subsequence pattern per fuzzy atom, plain
containment for the exact kinds); only the paths that pass are scored, and a heap keeps
the best ``limit``. Ties at the cut go to fewer path components, then lexical order (a
deterministic stand-in for upstream's walk order); the answer is sorted by score, highest
first, then by path.
"""

from __future__ import annotations

import heapq
import re
import threading
from dataclasses import dataclass

from . import query as q

LIMIT = 50


@dataclass(frozen=True)
class Ranked:
    path: str
    name: str
    is_dir: bool
    score: int
    indices: list[int]


class _Key:
    """Heap order: the worst kept match on top (lowest score, then deepest, then last path)."""

    __slots__ = ("score", "depth", "path", "item")

    def __init__(self, score: int, depth: int, path: str, item: Ranked) -> None:
        self.score, self.depth, self.path, self.item = score, depth, path, item

    def __lt__(self, other: _Key) -> bool:
        if self.score != other.score:
            return self.score < other.score
        if self.depth != other.depth:
            return self.depth > other.depth
        return self.path > other.path


def _prefilter(query: q.Query):  # noqa: ANN202
    """A function telling, from an ASCII path in lower case, whether it may match every
    positive atom (a non-ASCII path is always scored: accents it holds may match)."""
    tests = []
    for atom in query.atoms:
        if atom.negative:
            continue
        if not atom.ascii:
            return lambda h: False  # a non-ASCII atom never matches an ASCII path
        if atom.kind == q.FUZZY:
            tests.append(re.compile(".*?".join(re.escape(c) for c in atom.needle), re.S).search)
        else:
            tests.append(lambda h, n=atom.needle: n in h)
    return lambda h: all(t(h) for t in tests)


def rank(query: q.Query, entries: list[tuple[str, str, bool]], limit: int = LIMIT,
         cancel: threading.Event | None = None) -> tuple[list[Ranked], int]:
    """The best ``limit`` matches and how many entries matched in all."""
    if query.empty:
        return [], 0
    may_match = _prefilter(query)
    heap: list[_Key] = []
    total = 0
    for n, (path, name, is_dir) in enumerate(entries):
        if cancel is not None and not n & 1023 and cancel.is_set():
            break
        if path.isascii() and not may_match(path.lower()):
            continue
        found = q.ranked(query, path, name, is_dir)
        if found is None:
            continue
        total += 1
        score = found[0]
        key = _Key(score, path.count("/"), path, None)  # type: ignore[arg-type]
        if len(heap) < limit:
            key.item = Ranked(path, name, is_dir, score, found[1])
            heapq.heappush(heap, key)
        elif heap[0] < key:
            key.item = Ranked(path, name, is_dir, score, found[1])
            heapq.heapreplace(heap, key)
    best = sorted((k.item for k in heap), key=lambda r: (-r.score, r.path))
    return best, total

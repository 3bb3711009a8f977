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
    named: tuple | None = None  # the best directory the query names: (score, length, path, item)
    for n, (path, name, is_dir) in enumerate(entries):
        if cancel is not None and not n & 1023 and cancel.is_set():
            break
        if path.isascii() and not may_match(path.lower()):
            continue
        found = q.ranked(query, path, name, is_dir)
        if found is None:
            continue
        total += 1
        item = Ranked(path, name, is_dir, found[0], found[1])
        if is_dir and q.names_dir(query, name):
            rival = (-found[0], len(path), path)
            if named is None or rival < named[0]:
                named = (rival, item)
        _keep(heap, _Key(found[0], path.count("/"), path, item), limit)
    if named is not None:
        _crown(heap, named[1], limit)
    best = sorted((k.item for k in heap), key=lambda r: (-r.score, r.path))
    return best, total


def _keep(heap: list[_Key], key: _Key, limit: int) -> None:
    if len(heap) < limit:
        heapq.heappush(heap, key)
    elif heap[0] < key:
        heapq.heapreplace(heap, key)


def _crown(heap: list[_Key], item: Ranked, limit: int) -> None:
    """Codex lifts one directory only, the best-scored (then shortest) of those the query
    names exactly, to tier 2; the others keep their plain score."""
    heap[:] = [k for k in heap if k.item is not item]
    heapq.heapify(heap)
    lifted = Ranked(item.path, item.name, True, (2 << 16) + item.score, item.indices)
    heapq.heappush(heap, _Key(lifted.score, item.path.count("/"), item.path, lifted))
    if len(heap) > limit:
        heapq.heappop(heap)

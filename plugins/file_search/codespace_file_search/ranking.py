"""The best matches of a query among walked entries, ordered as Codex orders them.

Each path is first tested cheaply (a compiled subsequence pattern per fuzzy atom, plain
containment for the exact kinds); only the paths that pass are scored, and a heap keeps
the best ``limit``. Ties at the cut go to fewer path components, then lexical order (a
deterministic stand-in for upstream's walk order); the answer is sorted by score, highest
first, then by path.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass

from . import query as q
from .prefilter import candidates, subsequence_pattern

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


def rank(query: q.Query, entries: list[tuple[str, str, bool]], limit: int = LIMIT,
         cancel: threading.Event | None = None, memo: dict | None = None) -> tuple[list[Ranked], int]:
    """The best ``limit`` matches and how many entries matched in all."""
    if query.empty:
        return [], 0
    # When the prefilter decides ASCII paths exactly, a candidate whose best possible
    # score cannot beat the cut is counted without scoring it.
    picked, sure = candidates(query, entries, memo)
    bound = sum(25 * len(a.needle) + 9 for a in query.atoms if not a.negative)
    level_of = _name_levels(query)
    heap: list[_Key] = []
    total = 0
    named: tuple | None = None  # the best directory the query names: (rival key, item)
    for count, n in enumerate(_tiers_first(entries, picked, level_of)):
        if cancel is not None and not count & 1023 and cancel.is_set():
            break
        path, name, is_dir = entries[n]
        naming = is_dir and q.names_dir(query, name)
        full = len(heap) >= limit
        if sure and full and not naming and path.isascii():
            level = 0 if is_dir else level_of(name)
            if not _beats(heap[0], (level << 16) + bound, path):
                total += 1
                continue
        found = q.ranked(query, path, name, is_dir)
        if found is None:
            continue
        total += 1
        if naming:
            rival = (-found[0], len(path), path)
            if named is None or rival < named[0]:
                named = (rival, Ranked(path, name, is_dir, found[0], found[1]))
        if not full:
            heapq.heappush(heap, _Key(found[0], path.count("/"), path, Ranked(path, name, is_dir, *found)))
        elif _beats(heap[0], found[0], path):
            heapq.heapreplace(heap, _Key(found[0], path.count("/"), path, Ranked(path, name, is_dir, *found)))
    if named is not None:
        _crown(heap, named[1], limit)
    best = sorted((k.item for k in heap), key=lambda r: (-r.score, r.path))
    return best, total


def _name_levels(query: q.Query):  # noqa: ANN202
    """A function giving an ASCII file name's tier (3, 1 or 0) without scoring it."""
    atom = query.named
    if atom is None or not atom.ascii:
        return lambda name: 0
    test = subsequence_pattern(atom.needle).search

    def level(name: str) -> int:
        low = name.lower()
        if low == atom.needle:
            return 3
        return 1 if test(low) else 0
    return level


def _tiers_first(entries: list[tuple[str, str, bool]], picked: list[int], level_of) -> list[int]:  # noqa: ANN001
    """Candidates with files whose names the query tiers first, so the cut fills with them
    early and the rest is mostly counted, not scored."""
    first, rest = [], []
    for n in picked:
        path, name, is_dir = entries[n]
        (first if not is_dir and (not name.isascii() or level_of(name)) else rest).append(n)
    return first + rest


def _beats(worst: _Key, score: int, path: str) -> bool:
    """Whether an entry would displace the worst kept one (the heap's top)."""
    if score != worst.score:
        return score > worst.score
    depth = path.count("/")
    if depth != worst.depth:
        return depth < worst.depth
    return path < worst.path


def _crown(heap: list[_Key], item: Ranked, limit: int) -> None:
    """Codex lifts one directory only, the best-scored (then shortest) of those the query
    names exactly, to tier 2; the others keep their plain score."""
    heap[:] = [k for k in heap if k.path != item.path]
    heapq.heapify(heap)
    lifted = Ranked(item.path, item.name, True, (2 << 16) + item.score, item.indices)
    heapq.heappush(heap, _Key(lifted.score, item.path.count("/"), item.path, lifted))
    if len(heap) > limit:
        heapq.heappop(heap)

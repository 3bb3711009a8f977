"""The best matches of a query among walked entries, ordered as Codex orders them.

The prefilter (one pattern per atom over all paths at once) picks the candidates; they are
split by the tier the query can give them (a file named the atom, one whose name matches
it, the rest), best tier first. Only a candidate that could still enter the best
``limit`` is scored: when the prefilter decides ASCII paths exactly, a tier is dropped
whole once the worst kept score is above the best it could score, and once that score is
reached its rest is visited in the tie order (fewer path components, then path) and
dropped from the first candidate past the worst kept one, since ties go to the earlier.
A query of one anchored atom scores each distinct window once (``anchored``). Entries no
bound covers (non-ASCII paths, directories the query names) are scored one by one. The
answer is sorted by score, highest first, then by path.
"""

from __future__ import annotations

import heapq
import threading
from itertools import compress, repeat
from operator import itemgetter
from dataclasses import dataclass

from . import LIMIT  # the package's: the tool's definition reads it without loading this module
from . import query as q
from .anchored import best_of, single_anchored, window_scorer
from .prefilter import NAME, NAME_FUZZY, buffer_of, candidates


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


class _Best:
    """The best ``limit`` scored entries, how many matched, and the directory to crown."""

    def __init__(self, query: q.Query, limit: int) -> None:
        self.query, self.limit = query, limit
        self.heap: list[_Key] = []
        self.total = 0
        self.named: tuple | None = None  # the best directory the query names: (rival key, item)
        self.score = lambda path, name, is_dir: q.ranked(query, path, name, is_dir)

    def full(self) -> bool:
        return len(self.heap) >= self.limit

    def offer(self, path: str, name: str, is_dir: bool, naming: bool) -> None:
        found = self.score(path, name, is_dir)
        if found is None:
            return
        self.total += 1
        if naming:
            rival = (-found[0], len(path), path)
            if self.named is None or rival < self.named[0]:
                self.named = (rival, Ranked(path, name, is_dir, found[0], found[1]))
        heap = self.heap
        if len(heap) < self.limit:
            heapq.heappush(heap, _Key(found[0], path.count("/"), path, Ranked(path, name, is_dir, *found)))
        elif _beats(heap[0], found[0], path):
            heapq.heapreplace(heap, _Key(found[0], path.count("/"), path, Ranked(path, name, is_dir, *found)))


def rank(query: q.Query, entries: list[tuple[str, str, bool]], limit: int = LIMIT,
         cancel: threading.Event | None = None, memo: dict | None = None) -> tuple[list[Ranked], int]:
    """The best ``limit`` matches and how many entries matched in all."""
    if query.empty:
        return [], 0
    picked, sure = candidates(query, entries, memo)
    bound = sum(25 * len(a.needle) + 9 for a in query.atoms if not a.negative)  # nucleo's best per atom
    tiers, each = _split(query, entries, picked, memo)
    best = _Best(query, limit)
    anchored = single_anchored(query)
    if anchored is not None:
        best.score = window_scorer(query, anchored)
    for level, group in tiers:
        if cancel is not None and cancel.is_set():
            return _answer(best, limit)
        if anchored is not None:
            kept, matched, undecided = best_of(anchored, entries, group, limit, best.score,
                                                 buffer_of(entries, memo).blank_edged())
            best.total += matched
            group, level = kept + undecided, -1  # each of these is scored
        if not _fill(best, entries, group, (level << 16) + bound if sure and level >= 0 else None, cancel):
            return _answer(best, limit)
    for count, n in enumerate(each):
        if cancel is not None and not count & 1023 and cancel.is_set():
            break
        path, name, is_dir = entries[n]
        best.offer(path, name, is_dir, is_dir and q.names_dir(query, name))
    return _answer(best, limit)


def _fill(best: _Best, entries: list[tuple[str, str, bool]], group: list[int], top: int | None,
          cancel: threading.Event | None) -> bool:
    """Offer a tier's candidates whose score ``top`` bounds (None: no bound, or the
    prefilter is not exact), scoring only those that could enter; False: cancelled.
    Once the worst kept score reaches ``top``, only a candidate with that score and an
    earlier place in the tie order could enter: the rest is visited in that order, and
    counted unseen from the first that comes after the worst kept one."""
    narrowed = False
    k = count = 0
    while k < len(group):
        n = group[k]
        k += 1
        count += 1
        if cancel is not None and not count & 1023 and cancel.is_set():
            return False
        path, name, is_dir = entries[n]
        if top is not None and best.full():
            worst = best.heap[0]
            if worst.score > top:
                best.total += len(group) - k + 1  # a better tier filled the cut
                return True
            if worst.score == top:
                if not narrowed:
                    group, k, narrowed = _tie_order(entries, group[k - 1:]), 0, True
                    continue
                depth = path.count("/")
                if depth > worst.depth or (depth == worst.depth and path > worst.path):
                    best.total += len(group) - k + 1
                    return True
            if not _beats(worst, top, path):
                best.total += 1
                continue
        best.offer(path, name, is_dir, False)
    return True


def _tie_order(entries: list[tuple[str, str, bool]], group: list[int]) -> list[int]:
    """``group`` by fewer path components, then path."""
    paths = [entries[n][0] for n in group]
    depths = list(map(str.count, paths, repeat("/")))
    order = sorted(range(len(group)), key=paths.__getitem__)  # C-level keys: tuples compare slowly
    order.sort(key=depths.__getitem__)  # stable: paths stay in order within a depth
    return [group[i] for i in order]


def _answer(best: _Best, limit: int) -> tuple[list[Ranked], int]:
    if best.named is not None:
        _crown(best.heap, best.named[1], limit)
    return sorted((k.item for k in best.heap), key=lambda r: (-r.score, r.path)), best.total


def _split(query: q.Query, entries: list[tuple[str, str, bool]], picked: list[int],
           memo: dict | None) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """The candidates as (tier, indices), best tier first, and those to score one by one:
    non-ASCII paths (and any the buffer could not hold) and directories the query names."""
    atom = query.named
    other = buffer_of(entries, memo).other_set
    each = [n for n in picked if n in other] if other else []
    if atom is None or not atom.ascii:
        return ([(0, [n for n in picked if n not in other] if other else picked)] if picked else []), each
    buffer = buffer_of(entries, memo)
    exact = set(buffer.matching(NAME, atom.needle))
    matching = set(buffer.matching(NAME_FUZZY, atom.needle))
    dirs = _dirs(entries, memo)
    pool = set(picked).difference(other)
    named_dirs = exact & dirs & pool
    each.extend(named_dirs)
    level3 = (exact & pool) - dirs
    level1 = (matching & pool) - exact - dirs
    level0 = pool - level3 - level1 - named_dirs
    tiers = [(level, list(group)) for level, group in ((3, level3), (1, level1), (0, level0)) if group]
    return tiers, each


def prepare(entries: list[tuple[str, str, bool]], memo: dict) -> None:
    """Build what the first ranking of a walk would (its path buffer, its set of
    directories) ahead of any search: the warm-up's second half."""
    buffer_of(entries, memo)
    _dirs(entries, memo)


def _dirs(entries: list[tuple[str, str, bool]], memo: dict | None) -> set[int]:
    found = memo.get("dirs") if memo is not None else None
    if found is None:
        found = set(compress(range(len(entries)), map(itemgetter(2), entries)))
        if memo is not None:
            memo["dirs"] = found
    return found


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

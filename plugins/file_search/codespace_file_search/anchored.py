"""A query of one anchored atom (``^x`` or ``x$``): every candidate's exact score, cheaply.

On an ASCII path without blanks at its ends, such an atom can only match at one place (the
path's start, or its end), and nucleo's score there depends on nothing but the matched
characters and the one before them (a start of path counts as after a ``/``). So the
candidates are bucketed by that window, one path per window is scored, and the best
``limit`` are picked by (score, fewer components, path) without scoring the others; a
window scoring below the cut is counted, not looked at.
"""

from __future__ import annotations

import heapq
from itertools import compress, repeat

from . import query as q

_BLANK_EDGES = " \t\n\x0c\r"  # nucleo's ASCII whitespace (matcher._edges), which an anchored atom skips


def single_anchored(query: q.Query) -> q.Atom | None:
    atoms = query.atoms
    if len(atoms) == 1 and not atoms[0].negative and atoms[0].ascii and atoms[0].kind in (q.PREFIX, q.POSTFIX):
        return atoms[0]
    return None


def window_of(atom: q.Atom, path: str) -> tuple[str, int] | None:
    """(the characters the score depends on, where the match starts), or None when the
    path is not one this shortcut decides (non-ASCII, blank at an end, too short)."""
    size = len(atom.needle)
    if len(path) < size or not path.isascii() or path[:1] in _BLANK_EDGES or path[-1:] in _BLANK_EDGES:
        return None
    start = len(path) - size if atom.kind == q.POSTFIX else 0
    return (path[start - 1:start + size] if start else "/" + path[:size]), start


def window_scorer(query: q.Query, atom: q.Atom):  # noqa: ANN202
    """``q.ranked`` for this query, worked out once per window and reused."""
    seen: dict[str, tuple[int, list[int]] | None] = {}

    def scored(path: str, name: str, is_dir: bool) -> tuple[int, list[int]] | None:
        placed = window_of(atom, path)
        if placed is None:
            return q.ranked(query, path, name, is_dir)
        window, start = placed
        if window not in seen:
            found = q.ranked(query, path, name, is_dir)
            seen[window] = None if found is None else (found[0], [i - start for i in found[1]])
        hit = seen[window]
        return None if hit is None else (hit[0], [start + i for i in hit[1]])
    return scored


def best_of(atom: q.Atom, entries: list[tuple[str, str, bool]], group: list[int], limit: int,
            scored, blank_edged: set[int]) -> tuple[list[int], int, list[int]]:  # noqa: ANN001 - window_scorer's
    """(the entries that may be among the best ``limit``, in no order; how many others
    matched; the entries this shortcut does not decide). ``group``: ASCII paths only;
    ``blank_edged``: the entries whose path starts or ends with a blank."""
    size = len(atom.needle)
    paths = [entries[n][0] for n in group]
    # List comprehensions and C-level keys: these lines visit every candidate.
    windows = [p[-size - 1:] for p in paths] if atom.kind == q.POSTFIX else [p[:size] for p in paths]
    odd = set(compress(range(len(paths)), map(size.__ge__, map(len, paths))))
    if blank_edged:
        odd.update(i for i, n in enumerate(group) if n in blank_edged)
    for i in odd:
        windows[i] = None
    score_of: dict[str | None, int | None] = {None: None}
    for window, i in dict(zip(windows, range(len(paths)))).items():
        if window is not None:
            found = scored(*entries[group[i]])
            score_of[window] = None if found is None else found[0]
    scores = list(map(score_of.__getitem__, windows))
    kept: list[int] = []
    matched = 0
    for score in sorted({s for s in score_of.values() if s is not None}, reverse=True):
        members = [i for i, s in enumerate(scores) if s == score] if len(score_of) > 2 else \
            [i for i in range(len(paths)) if i not in odd]
        need = limit - len(kept)
        if len(members) > need:
            matched += len(members) - need  # below the cut: counted, not kept
            if need > 0:
                ranked = zip(map(str.count, map(paths.__getitem__, members), repeat("/")),
                             map(paths.__getitem__, members), members)
                members = [key[2] for key in heapq.nsmallest(need, ranked)]
            else:
                members = []
        kept.extend(group[i] for i in members)
    return kept, matched, [group[i] for i in odd]

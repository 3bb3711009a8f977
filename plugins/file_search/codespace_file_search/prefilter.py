"""Which walked entries can match a query, decided for all of them at once.

The ASCII paths are lowered and joined into one newline-separated buffer, and each
positive atom becomes one compiled pattern run over the whole buffer (``re.finditer`` in
C instead of a Python call per path): a fuzzy atom as its characters in order, each
followed by a run of anything but the next one (so the engine never backtracks), an
anchored or substring atom as its text. A match's offset gives its line, the line its
entry. For a fuzzy atom on an ASCII path this is exactly nucleo's test (a subsequence,
ignoring case); for the other kinds it is a superset the scorer then decides. Non-ASCII
paths are always kept: accents they hold may match an ASCII letter.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate

from . import query as q


_BLANKS = "[ \\t\\r\\x0b\\x0c]*"  # what an anchored atom may skip at the path's ends (never the newline)


def subsequence_pattern(needle: str) -> re.Pattern:
    parts = [re.escape(needle[0])]
    for c in needle[1:]:
        parts.append(f"[^\\n{re.escape(c)}]*{re.escape(c)}")
    return re.compile("".join(parts))


def _pattern(atom: q.Atom) -> re.Pattern:
    if atom.kind == q.FUZZY:
        return subsequence_pattern(atom.needle)
    text = re.escape(atom.needle)
    if atom.kind == q.PREFIX:
        return re.compile(f"^{_BLANKS}{text}", re.M)
    if atom.kind == q.POSTFIX:
        return re.compile(f"{text}{_BLANKS}$", re.M)
    if atom.kind == q.EXACT:
        return re.compile(f"^{_BLANKS}{text}{_BLANKS}$", re.M)
    return re.compile(text)


class Buffer:
    """The lowered ASCII paths of a walk, joined, with where each line starts."""

    def __init__(self, entries: list[tuple[str, str, bool]]) -> None:
        self.ascii: list[int] = []
        self.other: list[int] = []
        lines = []
        for n, entry in enumerate(entries):
            path = entry[0]
            if path.isascii() and "\n" not in path:  # a newline in a name would split its line
                self.ascii.append(n)
                lines.append(path)
            else:
                self.other.append(n)
        self.text = "\n".join(lines).lower()
        self.starts = [0, *accumulate(len(p) + 1 for p in lines)]

    def lines_matching(self, pattern: re.Pattern) -> set[int]:
        starts = self.starts
        found: set[int] = set()
        at = 0
        while True:
            m = pattern.search(self.text, at)
            if m is None:
                return found
            line = bisect_right(starts, m.start()) - 1
            found.add(line)
            at = starts[line + 1]  # the rest of this line can add nothing


def candidates(query: q.Query, entries: list[tuple[str, str, bool]]) -> list[int]:
    """Indices (in walk order) of the entries that may match every positive atom."""
    positive = [a for a in query.atoms if not a.negative]
    if any(not a.ascii for a in positive):
        return [n for n, entry in enumerate(entries) if not entry[0].isascii()]  # never an ASCII path
    if not positive:
        return list(range(len(entries)))
    buffer = Buffer(entries)
    lines: set[int] | None = None
    for atom in positive:
        found = buffer.lines_matching(_pattern(atom))
        lines = found if lines is None else lines & found
        if not lines:
            break
    picked = [buffer.ascii[i] for i in lines or ()]
    return sorted(picked + buffer.other)

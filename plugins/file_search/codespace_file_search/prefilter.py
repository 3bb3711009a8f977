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


_BLANKS = "[ \\t\\r\\x0c]*"  # what an anchored atom may skip at the path's ends (never the newline)


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
        paths = [entry[0] for entry in entries]
        text = "\n".join(paths)
        if text.isascii() and text.count("\n") == len(paths) - 1:
            self.ascii, self.other, lines = range(len(paths)), [], paths  # the usual tree: no detour
        else:
            self.ascii, self.other, lines = [], [], []
            for n, path in enumerate(paths):
                if path.isascii() and "\n" not in path:  # a newline in a name would split its line
                    self.ascii.append(n)
                    lines.append(path)
                else:
                    self.other.append(n)
            text = "\n".join(lines)
        self.text = text.lower()
        self.starts = [0, *accumulate(map(len, lines))]
        self.starts = [start + k for k, start in enumerate(self.starts)]

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


def exact_on_ascii(atom: q.Atom) -> bool:
    """Whether the atom's pattern decides an ASCII path exactly as nucleo does (else it is
    a superset): all but a substring whose first letter comes third or later (nucleo then
    looks for it case-sensitively, and not near the end) and anchors on a blank."""
    n = atom.needle
    if atom.kind == q.FUZZY:
        return True
    if atom.kind == q.SUBSTRING:
        letter = next((k for k, c in enumerate(n) if "a" <= c <= "z"), 0)
        return letter <= 1
    head = atom.kind in (q.PREFIX, q.EXACT) and n[:1].isspace()
    tail = atom.kind in (q.POSTFIX, q.EXACT) and n[-1:].isspace()
    return not (head or tail)


def candidates(query: q.Query, entries: list[tuple[str, str, bool]],
               memo: dict | None = None) -> tuple[list[int], bool]:
    """Indices (in walk order) of the entries that may match the query, and whether every
    ASCII one among them surely does; ``memo`` keeps the buffer for the next query."""
    positive = [a for a in query.atoms if not a.negative]
    sure = all(a.ascii and exact_on_ascii(a) for a in query.atoms)
    if any(not a.ascii for a in positive):
        return [n for n, entry in enumerate(entries) if not entry[0].isascii()], False
    buffer = memo.get("buffer") if memo is not None else None
    if buffer is None:
        buffer = Buffer(entries)
        if memo is not None:
            memo["buffer"] = buffer
    lines: set[int] | None = None
    for atom in positive:
        found = buffer.lines_matching(_pattern(atom))
        lines = found if lines is None else lines & found
        if not lines:
            return sorted(buffer.other), sure
    if lines is None:
        lines = set(range(len(buffer.ascii)))
    for atom in query.atoms:
        if atom.negative and atom.ascii and exact_on_ascii(atom):
            lines -= buffer.lines_matching(_pattern(atom))
    picked = [buffer.ascii[i] for i in lines]
    return sorted(picked + buffer.other), sure

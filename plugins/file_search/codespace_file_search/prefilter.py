"""Which walked entries can match a query, decided for all of them at once.

The ASCII paths are lowered and joined into one buffer, one line per entry ending with its
index, and each positive atom becomes one compiled pattern that ``findall`` runs over the
whole buffer in C, answering the indices of the lines it matches (no Python call per path
or per match): a fuzzy atom as its characters in order, each preceded by a run of
anything but it (so the engine never backtracks), an anchored or substring atom as its text. For a
fuzzy atom on an ASCII path this is exactly nucleo's test (a subsequence, ignoring case);
for the other kinds it is a superset the scorer then decides. Non-ASCII paths are always
kept: accents they hold may match an ASCII letter. Patterns confined to a line's last
component answer which files the query's tiers lift, the same way.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import chain

from . import query as q

# What an anchored atom may skip at the ends of an ASCII path (matcher._edges): nucleo's ASCII
# whitespace but the tab and newline, which no line here holds (see Buffer).
_BLANKS = "[ \\x0c\\r]*"
_INDEX = "[^\\n\\t]*+\\t(\\d+)"  # the rest of the line, and its entry index
NAME, NAME_FUZZY = "name", "name-fuzzy"  # kinds that judge an entry's name, not its path
_SUFFIXES: list[str] = []  # "\\t<n>\\n" for n so far: formatting them per walk cost more than the join
_SUFFIXES_KEPT = 200_000  # past this many (about 12 MB kept), the rest is formatted per walk


def _subsequence(needle: str) -> str:
    # Possessive runs: a run can only end at its character, so giving any back cannot help.
    rest = "".join(f"[^\\t\\n{re.escape(c)}]*+{re.escape(c)}" for c in needle[1:])
    return re.escape(needle[0]) + rest


@lru_cache(maxsize=256)
def _pattern(kind: str, needle: str) -> re.Pattern:
    text = re.escape(needle)
    if kind == q.FUZZY:
        return re.compile(_subsequence(needle) + _INDEX)
    if kind == q.PREFIX:
        return re.compile(f"\\n{_BLANKS}{text}{_INDEX}")
    if kind == q.POSTFIX:
        return re.compile(f"{text}{_BLANKS}\\t(\\d+)")
    if kind == q.EXACT:
        return re.compile(f"\\n{_BLANKS}{text}{_BLANKS}\\t(\\d+)")
    # Name patterns start with the needle's text, not with the '/' or newline before it:
    # a leading literal lets the engine skip ahead to it, which is several times faster.
    if kind == NAME:  # the last component ends with the needle (Buffer.matching checks its start)
        return re.compile(f"{text}\\t(\\d+)")
    if kind == NAME_FUZZY:  # the needle a subsequence of the last component (runs stop at '/')
        runs = "".join(f"[^\\t\\n/{re.escape(c)}]*+{re.escape(c)}" for c in needle[1:])
        return re.compile(f"{re.escape(needle[0])}{runs}[^\\t\\n/]*+\\t(\\d+)")
    return re.compile(text + _INDEX)


class Buffer:
    """The walk's paths, lowered, a line ``<path>\\t<entry index>`` each (the search finds a
    match's first character fast, and the index follows it on its line). Entries that are not
    ASCII, or hold a newline or a tab (which would blur the line or its index), are listed in
    ``other`` instead."""

    def __init__(self, entries: list[tuple[str, str, bool]]) -> None:
        paths = [entry[0] for entry in entries]
        size = len(paths)
        while len(_SUFFIXES) < min(size, _SUFFIXES_KEPT):
            _SUFFIXES.extend(f"\t{n}\n" for n in range(len(_SUFFIXES), min(max(size, 2 * len(_SUFFIXES)), _SUFFIXES_KEPT)))
        suffixes = _SUFFIXES if size <= len(_SUFFIXES) else \
            chain(_SUFFIXES, map("\t{}\n".format, range(len(_SUFFIXES), size)))
        text = "\n" + "".join(chain.from_iterable(zip(paths, suffixes)))
        self.other: list[int] = []
        if not (text.isascii() and text.count("\n") == size + 1 and text.count("\t") == size):
            lines = ["\n"]
            for n, path in enumerate(paths):
                if path.isascii() and "\n" not in path and "\t" not in path:
                    lines.append(f"{path}\t{n}\n")
                else:
                    self.other.append(n)
            text = "".join(lines)
        self.text = text.lower()
        self.size = size
        self.other_set = set(self.other)
        self._blank_edged: set[int] | None = None

    def matching(self, kind: str, needle: str) -> list[int]:
        """Indices (ascending) of the lines the atom's pattern finds."""
        if "\t" in needle or "\n" in needle or (kind in (NAME, NAME_FUZZY) and "/" in needle):
            return []  # no line here holds a tab or newline, no name a '/'
        pattern = _pattern(kind, needle)
        if kind == NAME:
            text = self.text
            return [int(m[1]) for m in pattern.finditer(text) if text[m.start() - 1] in "\n/"]
        return list(map(int, pattern.findall(self.text)))

    def blank_edged(self) -> set[int]:
        """Entries whose path starts or ends with a blank (as ``_BLANKS``)."""
        if self._blank_edged is None and not any(c in self.text for c in " \x0c\r"):
            self._blank_edged = set()  # the common case, settled by three scans in C
        if self._blank_edged is None:
            blank = "[ \\x0c\\r]"
            found = re.findall(f"\\n{blank}[^\\n\\t]*\\t(\\d+)|{blank}\\t(\\d+)", self.text)
            self._blank_edged = {int(a or b) for a, b in found}
        return self._blank_edged

    def ascii_lines(self) -> list[int]:
        if not self.other:
            return list(range(self.size))
        return [n for n in range(self.size) if n not in self.other_set]


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


def buffer_of(entries: list[tuple[str, str, bool]], memo: dict | None) -> Buffer:
    """The walk's buffer, kept in ``memo`` for the next query."""
    buffer = memo.get("buffer") if memo is not None else None
    if buffer is None:
        buffer = Buffer(entries)
        if memo is not None:
            memo["buffer"] = buffer
    return buffer


def candidates(query: q.Query, entries: list[tuple[str, str, bool]],
               memo: dict | None = None) -> tuple[list[int], bool]:
    """Indices (in walk order) of the entries that may match the query, and whether every
    ASCII one among them surely does; ``memo`` keeps the buffer for the next query."""
    positive = [a for a in query.atoms if not a.negative]
    sure = all(a.ascii and exact_on_ascii(a) for a in query.atoms)
    if any(not a.ascii for a in positive):
        return [n for n, entry in enumerate(entries) if not entry[0].isascii()], False
    buffer = buffer_of(entries, memo)
    found: list[int] | None = None
    kept: set[int] | None = None
    for atom in positive:
        lines = buffer.matching(atom.kind, atom.needle)
        if found is None:
            found = lines
        else:
            kept = set(lines) if kept is None else kept & set(lines)
        if not lines:
            return list(buffer.other), sure
    if found is None:
        found = buffer.ascii_lines()
    dropped: set[int] = set()
    for atom in query.atoms:
        if atom.negative and atom.ascii and exact_on_ascii(atom):
            dropped.update(buffer.matching(atom.kind, atom.needle))
    if kept is not None or dropped:
        found = [n for n in found if (kept is None or n in kept) and n not in dropped]
    if buffer.other:
        return sorted(found + buffer.other), sure
    return found, sure

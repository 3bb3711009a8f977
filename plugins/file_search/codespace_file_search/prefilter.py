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
from bisect import bisect_left
from functools import lru_cache
from itertools import chain

from . import query as q

# What an anchored atom may skip at the ends of an ASCII path (matcher._edges): nucleo's ASCII
# whitespace but the tab and newline, which no line here holds (see Buffer).
_BLANKS = "[ \\x0c\\r]*"
_INDEX = "[^\\n\\t]*+\\t(\\d+)"  # the rest of the line, and its entry index
NAME, NAME_FUZZY = "name", "name-fuzzy"  # kinds that judge an entry's name, not its path
BLOCK = 4096  # entries per block of the buffer (Buffer)
_SUFFIXES = [f"\t{n}\n" for n in range(BLOCK)]  # formatting them per block cost more than the join


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
    """The walk's paths, lowered, a line ``<path>\\t<number>`` each (the search finds a
    match's first character fast, and the number follows it on its line), in blocks of
    ``block`` entries: a line's number counts from its block's first entry (``bases``).
    Entries that are not ASCII, or hold a newline or a tab (which would blur the line or
    its index), are listed in ``other`` instead. Blocks, because a mended walk (entries
    dropped in place, new ones appended) changes few of them: :meth:`mended` builds only
    those again, where building the whole text costs the first search after a change
    about as much as the search itself."""

    def __init__(self, entries: list[tuple[str, str, bool]], block: int | None = None) -> None:
        self.block = block = block or BLOCK
        self.size = len(entries)
        self.bases: list[int] = []
        self.texts: list[str] = []
        self.others: list[list[int]] = []  # per block, numbered from its base
        paths = [entry[0] for entry in entries]
        for base in range(0, len(paths), block):
            self._add(paths, base, min(base + block, len(paths)))
        self._settle()

    def _add(self, paths: list[str], lo: int, hi: int) -> None:
        """A block of ``paths[lo:hi]``, numbered from ``lo``."""
        part = paths[lo:hi]
        kept = len(_SUFFIXES)
        suffixes = _SUFFIXES if len(part) <= kept else chain(_SUFFIXES, map("\t{}\n".format, range(kept, len(part))))
        text = "\n" + "".join(chain.from_iterable(zip(part, suffixes)))
        other: list[int] = []
        if not (text.isascii() and text.count("\n") == len(part) + 1 and text.count("\t") == len(part)):
            lines = ["\n"]
            for n, path in enumerate(part):
                if path.isascii() and "\n" not in path and "\t" not in path:
                    lines.append(f"{path}\t{n}\n")
                else:
                    other.append(n)
            text = "".join(lines)
        self.bases.append(lo)
        self.texts.append(text.lower())
        self.others.append(other)

    def _settle(self) -> None:
        self.other = [base + n for base, other in zip(self.bases, self.others) for n in other]
        self.other_set = set(self.other)
        self._blank_edged: set[int] | None = None

    def mended(self, entries: list[tuple[str, str, bool]], removed: list[int], start: int) -> Buffer:
        """The buffer of ``entries``, which are this buffer's entries without those at
        ``removed`` (ascending), in their order, then ``entries[start:]``: the blocks that
        lost an entry and the last one (which takes the new entries) are built again, the
        others kept with their base moved."""
        if start != self.size - len(removed) or len(entries) < start:
            return Buffer(entries, self.block)
        out = Buffer([], self.block)
        out.size = len(entries)
        paths: list[str] | None = None
        ends = self.bases[1:] + [self.size]
        for base, end, text, other in zip(self.bases, ends, self.texts, self.others):
            before, within = bisect_left(removed, base), bisect_left(removed, end)
            lo, hi = base - before, end - within
            if within == before:
                out.bases.append(lo)
                out.texts.append(text)
                out.others.append(other)
            elif hi > lo:
                paths = paths if paths is not None else [entry[0] for entry in entries]
                out._add(paths, lo, hi)
        if len(entries) > start:
            paths = paths if paths is not None else [entry[0] for entry in entries]
            lo = start
            if out.bases and start - out.bases[-1] < self.block:
                lo = out.bases.pop()  # the last block, if not full, takes the first new entries
                out.texts.pop()
                out.others.pop()
            for base in range(lo, len(entries), self.block):
                out._add(paths, base, min(base + self.block, len(entries)))
        out._settle()
        return out

    def matching(self, kind: str, needle: str) -> list[int]:
        """Indices (ascending) of the lines the atom's pattern finds."""
        if "\t" in needle or "\n" in needle or (kind in (NAME, NAME_FUZZY) and "/" in needle):
            return []  # no line here holds a tab or newline, no name a '/'
        pattern = _pattern(kind, needle)
        found: list[int] = []
        for base, text in zip(self.bases, self.texts):
            if kind == NAME:
                found += [base + int(m[1]) for m in pattern.finditer(text) if text[m.start() - 1] in "\n/"]
            else:
                hits = pattern.findall(text)
                if hits:
                    found += map(base.__add__, map(int, hits))
        return found

    def starting(self, prefixes: list[str]) -> list[int]:
        """Indices (ascending) of the entries whose path may start with one of ``prefixes``:
        the lines that do, case ignored, and every entry not held in the text."""
        heads = "|".join(re.escape(p.lower()) for p in sorted(set(prefixes)))
        pattern = re.compile(f"\\n(?:{heads})[^\\n\\t]*+\\t(\\d+)")
        found: list[int] = []
        for base, text in zip(self.bases, self.texts):
            hits = pattern.findall(text)
            if hits:
                found += map(base.__add__, map(int, hits))
        return sorted(found + self.other) if self.other else found

    def blank_edged(self) -> set[int]:
        """Entries whose path starts or ends with a blank (as ``_BLANKS``)."""
        if self._blank_edged is None and not any(c in text for text in self.texts for c in " \x0c\r"):
            self._blank_edged = set()  # the common case, settled by three scans in C
        if self._blank_edged is None:
            blank = "[ \\x0c\\r]"
            pattern = re.compile(f"\\n{blank}[^\\n\\t]*\\t(\\d+)|{blank}\\t(\\d+)")
            self._blank_edged = {base + int(a or b) for base, text in zip(self.bases, self.texts)
                                 for a, b in pattern.findall(text)}
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
    """The walk's buffer, kept in ``memo`` for the next query; for a mended walk, the
    buffer of the walk it was mended from, mended the same way (``walk_repair`` leaves
    ``memo["mended_from"]``: that buffer, the indices dropped, where the new entries begin)."""
    buffer = memo.get("buffer") if memo is not None else None
    if buffer is None:
        mend = memo.pop("mended_from", None) if memo is not None else None
        buffer = mend[0].mended(entries, mend[1], mend[2]) if mend is not None else Buffer(entries)
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

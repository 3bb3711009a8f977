"""Finding a chunk's lines in a file: upstream's four matching passes (apply-patch.md §5.3).

Each pass is a complete scan over every candidate position before the next,
looser pass starts, so an exact match further down beats a whitespace-tolerant
one further up. The looser views of the file are built only when a pass needs
them, and candidates come from ``list.index`` on the pattern's first line, so a
20,000-line file costs C-speed scans rather than a Python loop per position;
when many positions start like the pattern, a substring search in linear time
takes over (``Seeker._search``).
"""

from __future__ import annotations

from .rust_text import RUST_WHITESPACE

# Pass 4 maps these typographic characters to ASCII, one for one; nothing else
# (a sweep of ~60 look-alikes against the binary confirmed the list).
_PUNCTUATION = str.maketrans({
    **dict.fromkeys(["\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015", "\u2212"], "-"),
    **dict.fromkeys(["\u2018", "\u2019", "\u201a", "\u201b"], "'"),
    **dict.fromkeys(["\u201c", "\u201d", "\u201e", "\u201f"], '"'),
    **dict.fromkeys(
        ["\u00a0", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
         "\u202f", "\u205f", "\u3000"],
        " ",
    ),
})


def _exact(line: str) -> str:
    return line


def _trailing(line: str) -> str:
    return line.rstrip(RUST_WHITESPACE)


def _both(line: str) -> str:
    return line.strip(RUST_WHITESPACE)


def _punctuation(line: str) -> str:
    return line.strip(RUST_WHITESPACE).translate(_PUNCTUATION)


TYPE_CHECKING = False  # not typing's, nor collections.abc's: they cost the helper more than its patch
if TYPE_CHECKING:
    from collections.abc import Callable

PASSES: tuple[Callable[[str], str], ...] = (_exact, _trailing, _both, _punctuation)


_CANDIDATES = 32  # positions tried one by one before a search in linear time takes over
_MAX_CODE = 0x10FFFF  # chr()'s last: a file with more distinct lines keeps the position loop
_INDEX_AFTER = 65536  # lines scanned, beyond four times the view's length, before it is indexed


class Seeker:
    """Searches one file's lines; keeps the normalised views between chunks."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self._views: list[list[str] | None] = [lines, None, None, None]
        self._coded: list[tuple[dict[str, int], str] | bool | None] = [None, None, None, None]  # False: too many
        # Where each line of a view stands, made once scanning a view has cost a few times its
        # length: many chunks that each fail a pass (150,000 one-line chunks, each scanning the
        # rest of the file before the next pass matched, took 90 s) then look up, not scan.
        self._where: list[dict[str, list[int]] | None] = [None, None, None, None]
        self._scanned = [0, 0, 0, 0]

    def _view(self, index: int) -> list[str]:
        view = self._views[index]
        if view is None:
            view = self._views[index] = list(map(PASSES[index], self.lines))
        return view

    def find(self, pattern: list[str], start: int, end_of_file: bool = False) -> int | None:
        """First position >= ``start`` where ``pattern`` matches under the earliest pass.

        An end-of-file chunk may only match as the file's last lines.
        """
        m = len(pattern)
        n = len(self.lines)
        if m == 0:
            return start
        if m > n:
            return None
        first = max(start, n - m) if end_of_file else start
        last = n - m  # last admissible position
        if first > last:
            return None
        for index, normalise in enumerate(PASSES):
            wanted = pattern if index == 0 else [normalise(p) for p in pattern]
            found = self._scan(index, wanted, first, last)
            if found is not None:
                return found
        return None

    def _scan(self, index: int, wanted: list[str], first: int, last: int, unbounded: bool = False) -> int | None:
        """Candidates from ``list.index`` on the first line, each compared whole: quick while few
        positions start like the pattern. Past a few, each failed one would cost a comparison of
        up to the pattern's length (a 9 KB patch of 3,000 repeated lines against a 100,000-line
        file: 70 s), so the rest of the range goes to :meth:`_search` (``unbounded``: it could not
        take it)."""
        view = self._view(index)
        head = wanted[0]
        m = len(wanted)
        position = first
        stop = last + 1
        tries = 0
        while unbounded or tries < _CANDIDATES:
            found = self._next(index, view, head, position, stop)
            if found is None:
                return None
            position = found
            if m == 1 or view[position:position + m] == wanted:
                return position
            position += 1
            tries += 1
        return self._search(index, wanted, position, last)

    def _next(self, index: int, view: list[str], head: str, position: int, stop: int) -> int | None:
        """The first position in [position, stop) holding ``head``."""
        where = self._where[index]
        if where is not None:
            from bisect import bisect_left  # only here: the helper's start-up pays for every import

            positions = where.get(head, ())
            at = bisect_left(positions, position)
            return positions[at] if at < len(positions) and positions[at] < stop else None
        try:
            found = view.index(head, position, stop)
        except ValueError:
            found = None
        self._scanned[index] += (stop if found is None else found) - position
        if self._scanned[index] > 4 * len(view) + _INDEX_AFTER:
            where = self._where[index] = {}
            for at, line in enumerate(view):
                where.setdefault(line, []).append(at)
        return found

    def _search(self, index: int, wanted: list[str], first: int, last: int) -> int | None:
        """The same answer in time linear in the file: every distinct line of the view becomes
        one character, so the pattern is a substring to find (CPython's ``str.find`` switches to
        the two-way algorithm when plain scanning does too much work)."""
        coded = self._coded[index]
        if coded is None:
            codes: dict[str, int] = {}
            numbers = [codes.setdefault(line, len(codes)) for line in self._view(index)]
            coded = self._coded[index] = (codes, "".join(map(chr, numbers))) if len(codes) <= _MAX_CODE else False
        if coded is False:  # more distinct lines than characters: the candidates one by one
            return self._scan(index, wanted, first, last, unbounded=True)
        codes, text = coded
        needle = [codes.get(line) for line in wanted]
        if None in needle:
            return None  # a line the file does not have
        found = text.find("".join(map(chr, needle)), first, last + len(wanted))  # type: ignore[arg-type]
        return None if found < 0 else found

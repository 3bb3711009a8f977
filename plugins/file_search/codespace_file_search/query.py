"""A find_files query: nucleo's pattern syntax, and the tier Codex puts above the score.

Syntax: atoms separated by unescaped whitespace (``\\ `` is a literal space); ``!``
negates an atom (the path must not contain it), ``^`` anchors it at the start, ``$``
at the end (``^x$``: the whole path), ``'`` asks for a contiguous substring; ``\\``
before ``!``, ``^``, ``'`` or a final ``$`` makes it literal. Matching ignores case; an
atom without accented Latin letters also ignores accents in paths.

Tier (the score's high 16 bits), only for a query of one plain fuzzy atom and no backslash: 3 for a file
whose name is the atom, 1 for a file whose name matches it (and then the score and indices
are the name's, placed in the path), 2 for a directory whose name is the atom.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import matcher
from .matcher_chars import Hay, fold_needle, needle_normalizes, prepare

FUZZY, SUBSTRING, PREFIX, POSTFIX, EXACT = "fuzzy", "substring", "prefix", "postfix", "exact"
_KINDS = {FUZZY: matcher.fuzzy, SUBSTRING: matcher.substring, PREFIX: matcher.prefix,
          POSTFIX: matcher.postfix, EXACT: matcher.exact}
_ATOM_SPLIT = re.compile(r"(?<!\\)\s+")


@dataclass(frozen=True)
class Atom:
    needle: str
    """Folded text to find."""
    kind: str
    negative: bool
    normalizing: bool
    """Whether paths are compared with their accents removed (the needle has none)."""
    ascii: bool

    def match(self, hay: Hay) -> matcher.Match | None:
        return _KINDS[self.kind](hay, hay.chars(self.normalizing), self.needle, self.ascii)


@dataclass(frozen=True)
class Query:
    text: str
    atoms: tuple[Atom, ...]

    @property
    def empty(self) -> bool:
        return not self.text

    @property
    def named(self) -> Atom | None:
        """The atom names are tiered by: the only atom, when it is plain fuzzy (and, as the
        pinned binary answers, the query holds no backslash, escaped or not)."""
        if "\\" in self.text:
            return None
        if len(self.atoms) == 1 and self.atoms[0].kind == FUZZY and not self.atoms[0].negative:
            return self.atoms[0]
        return None


def parse_atom(raw: str) -> Atom:
    negative = False
    if raw.startswith("!"):
        raw, negative = raw[1:], True
    elif raw.startswith("\\!"):
        raw = raw[1:]
    kind = FUZZY
    if raw.startswith("^"):
        raw, kind = raw[1:], PREFIX
    elif raw.startswith("'"):
        raw, kind = raw[1:], SUBSTRING
    elif raw.startswith(("\\^", "\\'")):
        raw = raw[1:]
    dollar = ""
    if raw.endswith("\\$"):
        raw, dollar = raw[:-2], "$"
    elif raw.endswith("$"):
        raw = raw[:-1]
        kind = POSTFIX if kind == FUZZY else EXACT
    if negative and kind == FUZZY:
        kind = SUBSTRING
    needle = fold_needle(raw.replace("\\ ", " ") + dollar)
    return Atom(needle, kind, negative, needle_normalizes(needle), needle.isascii())


def parse(text: str) -> Query:
    atoms = []
    for raw in _ATOM_SPLIT.split(text):
        if raw:
            atom = parse_atom(raw)
            if atom.needle:
                atoms.append(atom)
    return Query(text, tuple(atoms))


def score_hay(query: Query, hay: Hay) -> tuple[int, list[int]] | None:
    """nucleo's score of a prepared path (the sum over atoms) and its matched indices, or None."""
    total = 0
    indices: set[int] = set()
    for atom in query.atoms:
        found = atom.match(hay)
        if atom.negative:
            if found is not None:
                return None
            continue
        if found is None:
            return None
        total += found[0]
        indices.update(found[1])
    return total, sorted(indices)


def score(query: Query, path: str) -> tuple[int, list[int]] | None:
    return score_hay(query, prepare(path))


def ranked(query: Query, path: str, name: str, is_dir: bool) -> tuple[int, list[int]] | None:
    """Codex's score of an entry, file tiers included, and its indices in ``path``; None: no
    match. (A directory's tier goes to one directory only: see ``ranking``.)"""
    if not is_dir:
        tiered = file_tier(query, path, name)
        if tiered is not None:
            return tiered  # the name matches, so the path (which ends with it) does too
    return score(query, path)


def file_tier(query: Query, path: str, name: str) -> tuple[int, list[int]] | None:
    """A file's tiered score and indices when its name matches the query's one plain atom."""
    atom = query.named
    if atom is None or not name:
        return None
    hay = prepare(name, wide=not path.isascii())
    found = atom.match(hay)
    if found is None:
        return None
    level = 3 if hay.chars(atom.normalizing) == atom.needle else 1
    shift = len(path) - len(name)
    return (level << 16) + found[0], [shift + i for i in found[1]]


def names_dir(query: Query, name: str) -> bool:
    """Whether a directory called ``name`` is named by the query (its one plain atom)."""
    atom = query.named
    return atom is not None and bool(name) and prepare(name).chars(atom.normalizing) == atom.needle


def tier(query: Query, name: str, is_dir: bool) -> int:
    if is_dir:
        return 2 if names_dir(query, name) else 0
    found = file_tier(query, name, name)
    return 0 if found is None else found[0] >> 16

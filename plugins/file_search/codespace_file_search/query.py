"""A find_files query: nucleo's pattern syntax, and the tier Codex puts above the score.

Syntax: atoms separated by unescaped whitespace (``\\ `` is a literal space); ``!``
negates an atom (the path must not contain it), ``^`` anchors it at the start, ``$``
at the end (``^x$``: the whole path), ``'`` asks for a contiguous substring; ``\\``
before ``!``, ``^``, ``'`` or a final ``$`` makes it literal. Matching ignores case and,
while the query has no accented Latin letter, accents in paths.

Tier (the score's high 16 bits): 3 for a file whose name equals the query, 2 for a
directory whose name equals it, 1 for a file whose name holds the query as a
subsequence; compared on the raw query text (trimmed), folded like the paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import matcher
from .matcher_chars import bonuses, needs_normalizing, prepare

FUZZY, SUBSTRING, PREFIX, POSTFIX, EXACT = "fuzzy", "substring", "prefix", "postfix", "exact"
_KINDS = {FUZZY: matcher.fuzzy, SUBSTRING: matcher.substring, PREFIX: matcher.prefix,
          POSTFIX: matcher.postfix, EXACT: matcher.exact}
_ATOM_SPLIT = re.compile(r"(?<!\\)\s+")


@dataclass(frozen=True)
class Atom:
    needle: str
    """Prepared (folded) text to find."""
    kind: str
    negative: bool


@dataclass(frozen=True)
class Query:
    text: str
    atoms: tuple[Atom, ...]
    normalizing: bool
    folded: str
    """The raw text, folded like paths: what the tier compares names with."""

    @property
    def empty(self) -> bool:
        return not self.text


def parse_atom(raw: str, normalizing: bool) -> Atom:
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
    if raw.endswith("\\$"):
        raw = raw[:-2] + "$"
    elif raw.endswith("$"):
        raw = raw[:-1]
        kind = POSTFIX if kind == FUZZY else EXACT
    if negative and kind == FUZZY:
        kind = SUBSTRING
    raw = raw.replace("\\ ", " ")
    return Atom(prepare(raw, normalizing), kind, negative)


def parse(text: str) -> Query:
    normalizing = needs_normalizing(text)
    atoms = []
    for raw in _ATOM_SPLIT.split(text):
        if not raw:
            continue
        atom = parse_atom(raw, normalizing)
        if atom.needle:
            atoms.append(atom)
    return Query(text, tuple(atoms), normalizing, prepare(text, normalizing))


def score(query: Query, path: str) -> tuple[int, list[int]] | None:
    """nucleo's score of ``path`` (the sum over atoms) and its matched indices, or None."""
    h = prepare(path, query.normalizing)
    bonus: list[int] | None = None
    total = 0
    indices: set[int] = set()
    for atom in query.atoms:
        if atom.negative:
            if atom.needle in h and _KINDS[atom.kind](h, bonus or bonuses(path), atom.needle) is not None:
                return None
            continue
        if bonus is None:
            bonus = bonuses(path)
        found = _KINDS[atom.kind](h, bonus, atom.needle)
        if found is None:
            return None
        total += found[0]
        indices.update(found[1])
    return total, sorted(indices)


def tier(query: Query, name: str, is_dir: bool) -> int:
    q = query.folded.strip()
    if not q:
        return 0
    folded = prepare(name, query.normalizing)
    if folded == q:
        return 2 if is_dir else 3
    if not is_dir and _subsequence(q, folded):
        return 1
    return 0


def _subsequence(needle: str, hay: str) -> bool:
    at = 0
    for c in needle:
        at = hay.find(c, at)
        if at < 0:
            return False
        at += 1
    return True

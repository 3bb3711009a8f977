"""Characters as nucleo's path matcher sees them: a class each (for the bonuses), case
folded, and Latin letters with diacritics reduced to their base letter ("smart"
normalisation: only when the query itself has no such letter).

Written from nucleo-matcher's documented behaviour and checked against the pinned
binary's answers (plugins/file_search/pin_check.py), not translated from its source.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

# Classes, ordered as the bonus rules compare them: word characters sort above DELIMITER.
WHITESPACE, NON_WORD, DELIMITER, LOWER, UPPER, LETTER, NUMBER = range(7)

SCORE_MATCH = 16
PENALTY_GAP_START = 3
PENALTY_GAP_EXTENSION = 1
BONUS_BOUNDARY = SCORE_MATCH // 2
BONUS_NON_WORD = SCORE_MATCH // 2
BONUS_CAMEL123 = BONUS_BOUNDARY - PENALTY_GAP_START
BONUS_CONSECUTIVE = PENALTY_GAP_START + PENALTY_GAP_EXTENSION
BONUS_FIRST_CHAR_MULTIPLIER = 2
# The path configuration: '/' separates components, the start of a path counts as one.
BONUS_BOUNDARY_WHITE = BONUS_BOUNDARY
BONUS_BOUNDARY_DELIMITER = BONUS_BOUNDARY + 1
INITIAL_CLASS = DELIMITER
DELIMITERS = "/"


def _ascii_class(c: str) -> int:
    if "a" <= c <= "z":
        return LOWER
    if "A" <= c <= "Z":
        return UPPER
    if "0" <= c <= "9":
        return NUMBER
    if c in " \t\n\r\x0b\x0c":
        return WHITESPACE
    if c in DELIMITERS:
        return DELIMITER
    return NON_WORD


@lru_cache(maxsize=65536)
def char_class(c: str) -> int:
    if c < "\x80":
        return _ascii_class(c)
    if c.islower():
        return LOWER
    if c.isupper():
        return UPPER
    if unicodedata.category(c) in ("Nd", "Nl", "No"):
        return NUMBER
    if c.isalpha():
        return LETTER
    if c.isspace():
        return WHITESPACE
    return NON_WORD


@lru_cache(maxsize=65536)
def normalize(c: str) -> str:
    """The base letter of a Latin letter with diacritics (é -> e), else ``c``."""
    if c < "\x80" or not ("\u00c0" <= c <= "\u024f" or "\u1e00" <= c <= "\u1eff"):
        return c
    base = unicodedata.normalize("NFD", c)[0]
    return base if base < "\x80" and base.isalpha() else c


@lru_cache(maxsize=65536)
def fold(c: str) -> str:
    """Lower case, one character for one (a fold that would lengthen leaves ``c``)."""
    if c < "\x80":
        return c.lower()
    low = c.lower()
    return low if len(low) == 1 else c


def needs_normalizing(query: str) -> bool:
    """Smart normalisation: reduce the haystack's diacritics only while the query has none."""
    return all(normalize(c) == c for c in query)


def prepare(text: str, normalizing: bool) -> str:
    """``text`` folded (and normalised) character for character: indices stay valid."""
    if text.isascii():
        return text.lower()
    if normalizing:
        return "".join(fold(normalize(c)) for c in text)
    return "".join(fold(c) for c in text)


def bonus_for(prev: int, cls: int) -> int:
    if cls > DELIMITER:
        if prev == WHITESPACE:
            return BONUS_BOUNDARY_WHITE
        if prev == DELIMITER:
            return BONUS_BOUNDARY_DELIMITER
        if prev == NON_WORD:
            return BONUS_BOUNDARY
    if (prev == LOWER and cls == UPPER) or (prev != NUMBER and cls == NUMBER):
        return BONUS_CAMEL123
    if cls == WHITESPACE:
        return BONUS_BOUNDARY_WHITE
    if cls == NON_WORD:
        return BONUS_NON_WORD
    return 0


def bonuses(text: str) -> list[int]:
    """The bonus a match earns at each position of ``text`` (from its class and its left neighbour's)."""
    out = []
    prev = INITIAL_CLASS
    for c in text:
        cls = char_class(c)
        out.append(bonus_for(prev, cls))
        prev = cls
    return out

"""Characters as nucleo's path matcher (nucleo-matcher at helix-editor/nucleo 4253de9, the
revision codex 0.171.0 builds) sees them: a class each (for the bonuses), case folded, and
Latin variants of ASCII letters reduced to that letter ("smart" normalisation, which an
atom turns off when its own text holds such a letter).

Written from the matcher's behaviour (read in its source, checked against the pinned
binary by plugins/file_search/pin_check.py), not translated from it. Scores are nucleo's:
16 a matched character, -3 opening a gap, -1 extending it; a bonus by the character's
class and its left neighbour's, doubled on an atom's first character.
"""

from __future__ import annotations

import re
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
# The path configuration codex uses: only '/' delimits, a space earns the plain boundary
# bonus, and the start of a path counts as just after a delimiter.
BONUS_BOUNDARY_WHITE = BONUS_BOUNDARY
BONUS_BOUNDARY_DELIMITER = BONUS_BOUNDARY + 1
INITIAL_CLASS = DELIMITER

_ASCII_CLASS = [NON_WORD] * 128
for _c in range(128):
    _ch = chr(_c)
    if "a" <= _ch <= "z":
        _ASCII_CLASS[_c] = LOWER
    elif "A" <= _ch <= "Z":
        _ASCII_CLASS[_c] = UPPER
    elif "0" <= _ch <= "9":
        _ASCII_CLASS[_c] = NUMBER
    elif _ch in " \t\n\x0b\x0c\r":
        _ASCII_CLASS[_c] = WHITESPACE
    elif _ch == "/":
        _ASCII_CLASS[_c] = DELIMITER


@lru_cache(maxsize=65536)
def fold(c: str) -> str:
    """Simple (one for one) case folding: a fold that would lengthen leaves ``c``."""
    if c < "\x80":
        return c.lower()
    f = c.casefold()
    if len(f) == 1:
        return f
    low = c.lower()
    return low if len(low) == 1 else c


def is_upper(c: str) -> bool:
    """Upper in nucleo's sense: a character that folds to another one."""
    return fold(c) != c


@lru_cache(maxsize=65536)
def char_class(c: str) -> int:
    if c < "\x80":
        return _ASCII_CLASS[ord(c)]
    if c.islower():
        return LOWER
    if is_upper(c):
        return UPPER
    if unicodedata.category(c) in ("Nd", "Nl", "No"):
        return NUMBER
    if c.isalpha():
        return LETTER
    if c.isspace():
        return WHITESPACE
    return NON_WORD


_LATIN_NAME = re.compile(r"LATIN (SMALL|CAPITAL) LETTER (?:(?:SHARP|LONG|DOTLESS|TURNED|REVERSED|SMALL CAPITAL|"
                         r"SCRIPT|OPEN|CLOSED|BARRED|MIDDLE-TILDE|INSULAR) )?([A-Z])\b")


@lru_cache(maxsize=65536)
def normalize(c: str) -> str:
    """The ASCII letter a Latin variant stands for (é -> e, ß -> s, ø -> o), else ``c``; only in
    the blocks nucleo normalises (Latin-1 to Latin Extended-B, Latin Extended Additional,
    super- and subscripts)."""
    cp = ord(c)
    if not (0xA0 <= cp <= 0x29F or 0x1E00 <= cp <= 0x1EFF or 0x2070 <= cp <= 0x209F):
        return c
    decomposed = unicodedata.normalize("NFKD", c)
    if decomposed and decomposed[0] != c and decomposed[0].isascii() and decomposed[0].isalnum():
        return decomposed[0]
    m = _LATIN_NAME.match(unicodedata.name(c, ""))
    if m:
        return m.group(2).lower() if m.group(1) == "SMALL" else m.group(2)
    return c


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


BONUS_TABLE = [[bonus_for(p, c) for c in range(7)] for p in range(7)]


_CLASS_BYTES = bytes(_ASCII_CLASS) + bytes(128)


class Hay:
    """A haystack prepared once for every atom: its characters folded (``plain``) and
    folded after normalising (``chars(True)``), their classes, and (computed on first use)
    the bonus at each position."""

    __slots__ = ("text", "ascii", "classes", "plain", "_normed", "_bonus")

    def __init__(self, text: str, is_ascii: bool, classes, plain: str) -> None:  # noqa: ANN001 - bytes or list
        self.text, self.ascii, self.classes, self.plain = text, is_ascii, classes, plain
        self._normed: str | None = None
        self._bonus: list[int] | None = None

    @property
    def bonus(self) -> list[int]:
        if self._bonus is None:
            classes = self.classes
            rows = BONUS_TABLE
            self._bonus = [rows[p][c] for p, c in zip((INITIAL_CLASS, *classes), classes)]
        return self._bonus

    def chars(self, normalizing: bool) -> str:
        if self.ascii or not normalizing:
            return self.plain
        if self._normed is None:
            self._normed = "".join(fold(normalize(c)) for c in self.text)
        return self._normed


def prepare(text: str, wide: bool = False) -> Hay:
    """``text`` prepared; ``wide``: treat it as non-ASCII even when it is ASCII (a file name
    cut from a non-ASCII path, which nucleo matches as such)."""
    if text.isascii():
        return Hay(text, not wide, text.encode().translate(_CLASS_BYTES), text.lower())
    classes = [char_class(c) for c in text]
    # Without normalisation nucleo folds only what it classes as upper case.
    plain = "".join(fold(c) if cls == UPPER else c for c, cls in zip(text, classes))
    return Hay(text, False, classes, plain)


def fold_needle(text: str) -> str:
    return text.lower() if text.isascii() else "".join(fold(c) for c in text)


def needle_normalizes(folded: str) -> bool:
    """Smart normalisation: an atom normalises paths only while it has no normalisable letter."""
    return folded.isascii() or all(normalize(c) == c for c in folded)

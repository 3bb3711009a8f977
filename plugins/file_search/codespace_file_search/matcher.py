"""One atom against one prepared path: nucleo's score and matched indices, in Python.

Each function takes the prepared haystack (``matcher_chars.Hay``), its characters as this
atom compares them (``h``: folded, normalised or not) and the atom's folded needle ``n``,
and answers ``(score, indices)`` or None. They follow nucleo-matcher's observable
behaviour, quirks included, because Codex's answers carry them: a one-character atom
takes the first best-bonus occurrence and stops at the first boundary; a fuzzy atom runs
the optimal alignment only between the first occurrence of its first character and the
last of its last, and equal alignments resolve as nucleo's matrix resolves them (a skip
over a consecutive run when both score the same, the rightmost end among equal ends); in a
non-ASCII path, a one-character or substring atom judges each candidate's bonus against
the previous *candidate's* class, not its left neighbour's.
"""

from __future__ import annotations

from .matcher_chars import (
    BONUS_BOUNDARY, BONUS_BOUNDARY_WHITE, BONUS_CONSECUTIVE, INITIAL_CLASS, PENALTY_GAP_EXTENSION,
    PENALTY_GAP_START, SCORE_MATCH, Hay, BONUS_TABLE,
)

Match = tuple[int, list[int]]


def run_score(hay: Hay, h: str, n: str, start: int, end: int) -> Match:
    """Score the greedy walk of ``n`` through ``h[start:end]`` (``h[start]`` matches ``n[0]``)."""
    classes = hay.classes
    prev = classes[start - 1] if start else INITIAL_CLASS
    cls = classes[start]
    first = BONUS_TABLE[prev][cls]
    prev = cls
    score = SCORE_MATCH + 2 * first
    indices = [start]
    k = 1
    want = n[1] if len(n) > 1 else n[0]
    in_gap = False
    consecutive = True
    for i in range(start + 1, end):
        cls = classes[i]
        if h[i] == want:
            indices.append(i)
            b = BONUS_TABLE[prev][cls]
            if consecutive:
                if b >= BONUS_BOUNDARY and b > first:
                    first = b
                b = max(b, first, BONUS_CONSECUTIVE)
            else:
                first = b
            score += SCORE_MATCH + b
            in_gap, consecutive = False, True
            k += 1
            if k < len(n):
                want = n[k]
        else:
            score = max(score - (PENALTY_GAP_EXTENSION if in_gap else PENALTY_GAP_START), 0)
            in_gap, consecutive = True, False
        prev = cls
    return score, indices


def _bonus_at(classes, at: int) -> int:  # noqa: ANN001 - bytes or list
    return BONUS_TABLE[classes[at - 1] if at else INITIAL_CLASS][classes[at]]


def _exact_range(hay: Hay, h: str, n: str, n_ascii: bool, start: int, end: int) -> Match | None:
    if end - start != len(n) or (hay.ascii and not n_ascii) or h[start:end] != n:
        return None
    return run_score(hay, h, n, start, end)


def _one_ascii(hay: Hay, h: str, c: str) -> Match | None:
    classes = hay.classes
    best = pos = 0
    at = h.find(c)
    while at >= 0:
        b = _bonus_at(classes, at)
        if SCORE_MATCH + 2 * b > best:
            best, pos = SCORE_MATCH + 2 * b, at
            if b >= BONUS_BOUNDARY_WHITE:
                break
        at = h.find(c, at + 1)
    return (best, [pos]) if best else None


def _one_unicode(hay: Hay, h: str, c: str) -> Match | None:
    start = h.find(c)
    if start < 0:
        return None
    classes = hay.classes
    prev = classes[start - 1] if start else INITIAL_CLASS
    best = pos = 0
    at = start
    while at >= 0:
        cls = classes[at]
        b = BONUS_TABLE[prev][cls]
        prev = cls
        if SCORE_MATCH + 2 * b > best:
            best, pos = SCORE_MATCH + 2 * b, at
            if b >= BONUS_BOUNDARY_WHITE:
                break
        at = h.find(c, at + 1)
    return best, [pos]


def fuzzy(hay: Hay, h: str, n: str, n_ascii: bool) -> Match | None:
    size, width = len(n), len(h)
    if size > width:
        return None
    if size == width:
        return _exact_range(hay, h, n, n_ascii, 0, width)
    if hay.ascii:
        if not n_ascii:
            return None
        if size == 1:
            return _one_ascii(hay, h, n)
        start = h.find(n[0], 0, width - size + 1)
        if start < 0:
            return None
        greedy = start
        for c in n[1:]:
            greedy = h.find(c, greedy + 1)
            if greedy < 0:
                return None
        greedy += 1
        end = max(h.rfind(n[-1], greedy), greedy - 1) + 1
        if size == end - start:
            return run_score(hay, h, n, start, greedy)
        return _optimal(hay, h, n, start, end)
    if size == 1:
        return _one_unicode(hay, h, n)
    start = h.find(n[0], 0, width - size + 1)
    if start < 0:
        return None
    end = h.rfind(n[-1], start + 1) + 1
    if end <= 0 or end - start < size:
        return None
    if size == end - start:
        return _exact_range(hay, h, n, n_ascii, start, end)
    return _optimal(hay, h, n, start, end)


def _optimal(hay: Hay, h: str, n: str, start: int, end: int) -> Match | None:  # noqa: C901 - one matrix pass
    """The best alignment of ``n`` in ``h[start:end]``: per row, the score of matching that
    needle character at each column (``m``), whether it continued a run (``diag``), and
    per column the best gap score after this row's last match (``p``, ``p_from_m``)."""
    bonus = hay.bonus
    size = len(n)
    offs = [start]
    at = start
    for c in n[1:]:
        at = h.find(c, at + 1, end)
        if at < 0:
            return None  # a non-ASCII path the prefilter let through
        offs.append(at)
    m = [0] * end
    cb = [0] * end
    c0 = n[0]
    for j in range(start, end):
        if h[j] == c0:
            m[j] = SCORE_MATCH + 2 * bonus[j]
            cb[j] = bonus[j]
    ms, diags, pfs = [m], [[False] * end], []
    for i in range(size - 1):
        nxt = n[i + 1]
        m2, cb2, diag2, pf = [0] * end, [0] * end, [False] * end, [False] * end
        prev_p = prev_m = 0
        for j in range(offs[i], end):
            from_m = prev_m - PENALTY_GAP_START if prev_m > PENALTY_GAP_START else 0
            from_p = prev_p - PENALTY_GAP_EXTENSION if prev_p > PENALTY_GAP_EXTENSION else 0
            if from_m > from_p:
                p = from_m
                pf[j] = True
            else:
                p = from_p
            here = m[j]
            if j + 1 < end and h[j + 1] == nxt:
                b = bonus[j + 1]
                if not here:
                    m2[j + 1], cb2[j + 1] = p + b + SCORE_MATCH, b
                else:
                    run = cb[j] if cb[j] > BONUS_CONSECUTIVE else BONUS_CONSECUTIVE
                    if b >= BONUS_BOUNDARY and b > run:
                        run = b
                    by_run = here + (run if run > b else b)
                    by_gap = p + b
                    if by_run > by_gap:
                        m2[j + 1], cb2[j + 1], diag2[j + 1] = by_run + SCORE_MATCH, run, True
                    else:
                        m2[j + 1], cb2[j + 1] = by_gap + SCORE_MATCH, b
            prev_p, prev_m = p, here
        pfs.append(pf)
        ms.append(m2)
        diags.append(diag2)
        m, cb = m2, cb2
    best_j, best = -1, 0
    for j in range(offs[-1], end):
        if m[j] >= best and m[j]:
            best_j, best = j, m[j]
    if best_j < 0:
        return None
    return best, _trace(diags, pfs, size - 1, best_j)


def _trace(diags: list[list[bool]], pfs: list[list[bool]], i: int, j: int) -> list[int]:
    out = [0] * (i + 1)
    in_m = True
    while True:
        if in_m:
            out[i] = j
            if i == 0:
                return out
            in_m = diags[i][j]
            i -= 1
        else:
            in_m = pfs[i][j]
        j -= 1


_ASCII_BLANKS = frozenset(" \t\n\x0c\r")  # Rust's u8::is_ascii_whitespace: not \x0b, not \x1c-\x1f


def _blank(c: str, ascii_hay: bool) -> bool:
    """Whitespace as nucleo trims it: the ASCII set above in an ASCII path, the Unicode
    White_Space property in any other (Python's isspace also holds \x1c-\x1f)."""
    if ascii_hay:
        return c in _ASCII_BLANKS
    return c.isspace() and not "\x1c" <= c <= "\x1f"


def _edges(hay: Hay, n: str) -> tuple[int, int]:
    """(leading, trailing) whitespace of the path that an anchored atom skips."""
    text = hay.text
    ascii_hay = hay.ascii
    if not text or not (_blank(text[0], ascii_hay) or _blank(text[-1], ascii_hay)):
        return 0, 0
    lead = trail = 0
    if not n[:1].isspace():
        while lead < len(text) and _blank(text[lead], ascii_hay):
            lead += 1
    if not n[-1:].isspace():
        while trail < len(text) and _blank(text[-1 - trail], ascii_hay):
            trail += 1
    if lead == len(text):
        lead = trail = 0  # an all-blank path: nucleo counts no blanks at all
    return lead, trail


def prefix(hay: Hay, h: str, n: str, n_ascii: bool) -> Match | None:
    lead, _ = _edges(hay, n)
    if len(h) - lead < len(n):
        return None
    return _exact_range(hay, h, n, n_ascii, lead, lead + len(n))


def postfix(hay: Hay, h: str, n: str, n_ascii: bool) -> Match | None:
    _, trail = _edges(hay, n)
    if len(h) - trail < len(n):
        return None
    return _exact_range(hay, h, n, n_ascii, len(h) - len(n) - trail, len(h) - trail)


def exact(hay: Hay, h: str, n: str, n_ascii: bool) -> Match | None:
    lead, trail = _edges(hay, n)
    if trail == len(h):
        return None
    return _exact_range(hay, h, n, n_ascii, lead, len(h) - trail)


def substring(hay: Hay, h: str, n: str, n_ascii: bool) -> Match | None:
    size, width = len(n), len(h)
    if size > width:
        return None
    if size == width:
        return _exact_range(hay, h, n, n_ascii, 0, width)
    if hay.ascii:
        if not n_ascii:
            return None
        if size == 1:
            return _one_ascii(hay, h, n)
        at = _substring_ascii(hay, h, n)
    else:
        if size == 1:
            return _one_unicode(hay, h, n)
        at = _substring_unicode(hay, h, n)
    if at is None:
        return None
    return run_score(hay, h, n, at, at + size)


def _best_start(hay: Hay, h: str, n: str, candidates) -> int | None:  # noqa: ANN001 - an iterator of int
    classes = hay.classes
    best = pos = 0
    for at in candidates:
        b = _bonus_at(classes, at)
        if SCORE_MATCH + 2 * b > best and h.startswith(n[1:], at + 1):
            best, pos = SCORE_MATCH + 2 * b, at
            if b >= BONUS_BOUNDARY_WHITE:
                break
    return pos if best else None


def _finds(text: str, n: str, stop: int):  # noqa: ANN202
    at = text.find(n, 0, stop)
    while at >= 0:
        yield at
        at = text.find(n, at + 1, stop)


def _substring_ascii(hay: Hay, h: str, n: str) -> int | None:
    """Where nucleo's ASCII substring search settles: candidates for the first character
    (any case), or, when the needle starts with non-letters, whole occurrences in the
    path as written that end before ``len - len(n) + k`` (k: the first letter's index)."""
    size, width = len(n), len(h)
    letter = next((k for k, c in enumerate(n) if "a" <= c <= "z"), None)
    if letter is None:
        return _best_start(hay, h, n, _finds(hay.text, n, width))
    if letter <= 1:
        return _best_start(hay, h, n, _finds(h, n[0], width - size + 1))
    return _best_start(hay, h, n, _finds(hay.text, n, width - size + letter))


def _substring_unicode(hay: Hay, h: str, n: str) -> int | None:
    """Candidates from the first occurrence on, each bonus judged against the previous
    candidate's class; the last possible start (the path's tail) is never tried."""
    size, width = len(n), len(h)
    start = h.find(n[0], 0, width - size + 1)
    if start < 0 or h.rfind(n[-1], start + 1) + 1 - start < size:
        return None
    classes = hay.classes
    prev = classes[start - 1] if start else INITIAL_CLASS
    best = pos = 0
    at = h.find(n[0], start, width - size)
    while at >= 0:
        cls = classes[at]
        b = BONUS_TABLE[prev][cls]
        prev = cls
        if SCORE_MATCH + 2 * b > best and h.startswith(n[1:], at + 1):
            best, pos = SCORE_MATCH + 2 * b, at
            if b >= BONUS_BOUNDARY_WHITE:
                break
        at = h.find(n[0], at + 1, width - size)
    return pos if best else None

"""One query atom against one path: nucleo's scores and matched indices, in Python.

The fuzzy kind is the optimal alignment (a score matrix over the needle's characters and
the haystack's positions, as nucleo computes it); the exact kinds (substring, prefix,
postfix, whole) score their one contiguous run the same way. Texts arrive prepared
(``matcher_chars.prepare``: folded, maybe normalised) beside their bonus lists, so a
path is prepared once for all atoms.
"""

from __future__ import annotations

from .matcher_chars import (
    BONUS_BOUNDARY, BONUS_CONSECUTIVE, BONUS_FIRST_CHAR_MULTIPLIER, PENALTY_GAP_EXTENSION,
    PENALTY_GAP_START, SCORE_MATCH,
)

Match = tuple[int, list[int]]  # (score, indices)


def score_run(bonus: list[int], start: int, length: int) -> int:
    """The score of ``length`` consecutive matched positions from ``start``."""
    first = bonus[start]
    score = SCORE_MATCH + first * BONUS_FIRST_CHAR_MULTIPLIER
    for j in range(start + 1, start + length):
        b = bonus[j]
        if b >= BONUS_BOUNDARY and b > first:
            first = b
        score += SCORE_MATCH + max(b, first, BONUS_CONSECUTIVE)
    return score


def substring(h: str, bonus: list[int], n: str) -> Match | None:
    """The best-scoring occurrence of ``n`` in ``h`` (the first of equal ones)."""
    at = h.find(n)
    best: Match | None = None
    while at >= 0:
        score = score_run(bonus, at, len(n))
        if best is None or score > best[0]:
            best = (score, list(range(at, at + len(n))))
        at = h.find(n, at + 1)
    return best


def _lead(h: str, n: str) -> int:
    if n[:1].isspace():
        return 0
    return len(h) - len(h.lstrip())


def _trail(h: str, n: str) -> int:
    if n[-1:].isspace():
        return len(h)
    return len(h.rstrip())


def prefix(h: str, bonus: list[int], n: str) -> Match | None:
    at = _lead(h, n)
    if not h.startswith(n, at):
        return None
    return score_run(bonus, at, len(n)), list(range(at, at + len(n)))


def postfix(h: str, bonus: list[int], n: str) -> Match | None:
    end = _trail(h, n)
    at = end - len(n)
    if at < 0 or h[at:end] != n:
        return None
    return score_run(bonus, at, len(n)), list(range(at, end))


def exact(h: str, bonus: list[int], n: str) -> Match | None:
    at, end = _lead(h, n), _trail(h, n)
    if h[at:end] != n:
        return None
    return score_run(bonus, at, len(n)), list(range(at, end))


def fuzzy(h: str, bonus: list[int], n: str) -> Match | None:
    """The optimal alignment of ``n`` as a subsequence of ``h``, or None."""
    if len(n) == 1:
        return _single(h, bonus, n)
    start = h.find(n[0])
    if start < 0:
        return None
    at = start
    for c in n[1:]:
        at = h.find(c, at + 1)
        if at < 0:
            return None
    end = h.rfind(n[-1]) + 1
    return _align(h, bonus, n, start, end)


def _single(h: str, bonus: list[int], n: str) -> Match | None:
    at = h.find(n)
    if at < 0:
        return None
    best_at, best = at, bonus[at]
    at = h.find(n, at + 1)
    while at >= 0:
        if bonus[at] > best:
            best_at, best = at, bonus[at]
        at = h.find(n, at + 1)
    return SCORE_MATCH + best * BONUS_FIRST_CHAR_MULTIPLIER, [best_at]


def _align(h: str, bonus: list[int], n: str, start: int, end: int) -> Match:  # noqa: C901 - one matrix pass
    width = end - start
    rows = len(n)
    # Per row: m[j] score with n[i] matched at start+j (0: none), cb[j] its run's first bonus,
    # diag[j] whether the match continues a run; g[j] the gap score after a match, gm[j] whether
    # that gap opened right after a match (else it extends an older gap).
    ms: list[list[int]] = []
    diags: list[list[bool]] = []
    gms: list[list[bool]] = []
    prev_m: list[int] = []
    prev_g: list[int] = []
    prev_cb: list[int] = []
    for i in range(rows):
        c = n[i]
        m = [0] * width
        cb = [0] * width
        diag = [False] * width
        g = [0] * width
        gm = [False] * width
        last_m = 0
        last_g = -1  # -1: no match of this row yet (a gap needs one before it)
        for j in range(width):
            if j > 0:
                if last_m:
                    from_m = last_m - PENALTY_GAP_START
                    from_g = last_g - PENALTY_GAP_EXTENSION if last_g >= 0 else -1
                    if from_m > from_g:  # equal: keep the older match (upstream's indices do)
                        g[j], gm[j] = max(from_m, 0), True
                    else:
                        g[j] = max(from_g, 0)
                    last_g = g[j]
                elif last_g >= 0:
                    g[j] = max(last_g - PENALTY_GAP_EXTENSION, 0)
                    last_g = g[j]
                else:
                    g[j] = -1
            else:
                g[j] = -1
            if h[start + j] == c:
                b = bonus[start + j]
                if i == 0:
                    m[j], cb[j] = SCORE_MATCH + b * BONUS_FIRST_CHAR_MULTIPLIER, b
                elif j > 0:
                    score_d = -1
                    first = 0
                    if prev_m[j - 1]:
                        first = prev_cb[j - 1]
                        if b >= BONUS_BOUNDARY and b > first:
                            first = b
                        score_d = prev_m[j - 1] + SCORE_MATCH + max(b, first, BONUS_CONSECUTIVE)
                    score_g = prev_g[j - 1] + SCORE_MATCH + b if prev_g[j - 1] >= 0 else -1
                    if score_d >= 0 and score_d >= score_g:
                        m[j], cb[j], diag[j] = score_d, first, True
                    elif score_g >= 0:
                        m[j], cb[j] = score_g, b
            last_m = m[j]
        ms.append(m)
        diags.append(diag)
        gms.append(gm)
        prev_m, prev_g, prev_cb = m, g, cb
    last = ms[-1]
    best_j = max(range(width - 1, -1, -1), key=last.__getitem__)  # equal ends: the rightmost, as upstream
    return last[best_j], _trace(ms, diags, gms, best_j, start)


def _trace(ms: list[list[int]], diags: list[list[bool]], gms: list[list[bool]], j: int, start: int) -> list[int]:
    out = [0] * len(ms)
    i = len(ms) - 1
    while True:
        out[i] = start + j
        if i == 0:
            return out
        if diags[i][j]:
            i, j = i - 1, j - 1
            continue
        # A gap in row i-1 ending at j-1: walk it back to the match that opened it.
        i, j = i - 1, j - 1
        while not gms[i][j]:
            j -= 1
        j -= 1

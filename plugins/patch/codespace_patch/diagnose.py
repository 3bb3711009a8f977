"""What an agent needs to fix a chunk that did not match: which chunk, what it
expected, and the closest lines the file actually has.

Only runs on the failure path, so it may be slower than the matcher; it is still
bounded (a vote per equal line, then a per-line similarity on small files only).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .parser import Chunk
from .seek import PASSES

_LOOSEST = PASSES[-1]
_SIMILARITY_MAX_LINES = 5000
_SHOW = 12  # lines of a window shown in the message
# A 3,000-line chunk of one repeated line against 100,000 such lines cast 300 million votes
# (76 s, the server held): a line found more than _COMMON times does not vote, and the votes
# stop at _VOTES.
_COMMON = 1000
_VOTES = 2_000_000


def _closest_window(texts: list[str], wanted: list[str], cursor: int) -> tuple[int, int] | None:
    """(start, score): the window agreeing with ``wanted`` on the most lines under
    upstream's loosest comparison; ties go to the first window at or after ``cursor``."""
    if not texts or not wanted:
        return None
    positions: dict[str, list[int]] = defaultdict(list)
    for index, text in enumerate(texts):
        positions[_LOOSEST(text)].append(index)
    votes: dict[int, int] = defaultdict(int)
    budget = _VOTES
    for offset, line in enumerate(wanted):
        key = _LOOSEST(line)
        where = positions.get(key, ())
        if not key or len(where) > _COMMON:
            continue  # blank or everywhere: such lines agree with everything and locate nothing
        budget -= len(where)
        if budget < 0:
            break  # the windows found so far are the answer: a message must not cost minutes
        for index in where:
            start = index - offset
            if 0 <= start <= max(0, len(texts) - len(wanted)):
                votes[start] += 1
    if votes:
        best = max(votes.values())
        starts = sorted(s for s, v in votes.items() if v == best)
        after = [s for s in starts if s >= cursor]
        return (after or starts)[0], best
    if len(texts) > _SIMILARITY_MAX_LINES:
        return None
    import difflib  # only on this failure path: it costs start-up time for the helper
    probe = next((w for w in wanted if _LOOSEST(w)), None)
    if probe is None:
        return None
    stripped = [_LOOSEST(t) for t in texts]
    match = difflib.get_close_matches(_LOOSEST(probe), stripped, n=1, cutoff=0.5)
    if not match:
        return None
    index = stripped.index(match[0]) - wanted.index(probe)
    return max(0, min(index, max(0, len(texts) - len(wanted)))), 0


def _numbered(texts: list[str], start: int, count: int) -> str:
    end = min(len(texts), start + min(count, _SHOW))
    shown = "\n".join(f"{i + 1:>6} | {texts[i]}" for i in range(start, end))
    if start + count > end:
        shown += f"\n       | ... ({start + count - end} more)"
    return shown


def _where(chunk: Chunk, number: int, total: int) -> str:
    header = f"@@ {chunk.context}" if chunk.context else "@@"
    return f"chunk {number} of {total} ('{header}', patch line {chunk.line})"


def lines_hint(texts: list[str], chunk: Chunk, number: int, total: int, cursor: int, path: str) -> tuple[str, dict[str, Any]]:
    expected = chunk.old
    details: dict[str, Any] = {
        "path": path, "chunk": number, "chunks": total, "patch_line": chunk.line,
        "expected": expected, "search_from_line": cursor + 1, "end_of_file": chunk.end_of_file,
    }
    parts = [f"In {path}, {_where(chunk, number, total)}: its ' ' and '-' lines were not found "
             f"at or after line {cursor + 1}" + (" at the end of the file ('*** End of File')" if chunk.end_of_file else "") + "."]
    window = _closest_window(texts, expected, cursor)
    if window is not None:
        start, score = window
        count = min(len(expected), len(texts) - start)
        details["closest"] = {"start_line": start + 1, "lines": texts[start:start + count], "lines_agreeing": score}
        note = " (before the previous chunk: chunks must follow file order)" if start < cursor else ""
        parts.append(f"Closest lines in the file, from line {start + 1}{note}:\n{_numbered(texts, start, count)}")
    else:
        parts.append("No similar lines were found in the file.")
    parts.append("Copy context and removed lines exactly from the current file (read_file shows it), "
                 "keep chunks in file order, and send the patch again.")
    return "\n".join(parts), details


def context_hint(texts: list[str], chunk: Chunk, number: int, total: int, cursor: int, path: str) -> tuple[str, dict[str, Any]]:
    details: dict[str, Any] = {
        "path": path, "chunk": number, "chunks": total, "patch_line": chunk.line,
        "context": chunk.context, "search_from_line": cursor + 1,
    }
    parts = [f"In {path}, {_where(chunk, number, total)}: no line at or after line {cursor + 1} "
             "matches the '@@' context header."]
    window = _closest_window(texts, [chunk.context], cursor)
    if window is not None:
        start, _ = window
        details["closest"] = {"start_line": start + 1, "lines": [texts[start]]}
        note = " (before the previous chunk: chunks must follow file order)" if start < cursor else ""
        parts.append(f"Closest line{note}:\n{_numbered(texts, start, 1)}")
    parts.append("The '@@' header must repeat a line that appears above the chunk's lines, exactly as in the file.")
    return "\n".join(parts), details

"""Unified diffs of what a patch did, built from the rewrite's own bookkeeping.

The rewrite knows which lines it carried over, so no diff algorithm runs: a
200-chunk patch on a 20,000-line file costs a walk over the changed regions
instead of a SequenceMatcher over the whole file.
"""

from __future__ import annotations

from typing import Protocol

from .line_endings import Lines


class LineView(Protocol):
    """What a diff reads of a file's lines (:class:`Lines`, or the text path's view)."""

    ends_unterminated: bool  # the last line has no terminator

    def __len__(self) -> int: ...

    def span(self, start: int, stop: int) -> str:
        """Lines ``start`` to ``stop``, each followed by LF (whatever its own terminator)."""


CONTEXT = 3
NO_NEWLINE = "\\ No newline at end of file"


def _equal_blocks(old: LineView, new: LineView, kept: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``kept`` merged, minus lines whose terminator changed (an unterminated last line)."""
    blocks: list[tuple[int, int, int]] = []
    for i, j, n in kept:
        if n <= 0:
            continue
        # Only a last line can lack a terminator; if it gained or lost one, it changed.
        last = i + n - 1
        old_open = last == len(old) - 1 and old.ends_unterminated
        new_open = j + n - 1 == len(new) - 1 and new.ends_unterminated
        if old_open != new_open:
            n -= 1
            if n == 0:
                continue
        if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
            pi, pj, pn = blocks[-1]
            blocks[-1] = (pi, pj, pn + n)
        else:
            blocks.append((i, j, n))
    return blocks


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _lines(out: list[str], prefix: str, span: str, at_open_end: bool) -> None:
    """Append a span's lines as diff lines; ``at_open_end``: they end the file, unterminated."""
    if span:
        # Whole spans at once: a line's text never holds an LF, so every LF but the
        # last starts a new diff line.
        out.append(prefix + span[:-1].replace("\n", "\n" + prefix) + "\n")
        if at_open_end:
            out.append(NO_NEWLINE + "\n")


def unified(
    old: LineView | None, new: LineView | None, kept: list[tuple[int, int, int]], a_label: str, b_label: str
) -> str:
    """A unified diff (3 lines of context) of ``old`` -> ``new``; ``None`` means the file is absent."""
    old_lines = Lines([], [], "\n") if old is None else old
    new_lines = Lines([], [], "\n") if new is None else new
    n_old, n_new = len(old_lines), len(new_lines)
    blocks = _equal_blocks(old_lines, new_lines, kept) + [(n_old, n_new, 0)]
    changes: list[tuple[int, int, int, int]] = []
    i = j = 0
    for bi, bj, n in blocks:
        if bi > i or bj > j:
            changes.append((i, bi, j, bj))
        i, j = bi + n, bj + n
    if not changes:
        return ""
    # Changes closer than 2*CONTEXT equal lines share a hunk.
    hunks: list[list[tuple[int, int, int, int]]] = [[changes[0]]]
    for change in changes[1:]:
        if change[0] - hunks[-1][-1][1] <= 2 * CONTEXT:
            hunks[-1].append(change)
        else:
            hunks.append([change])
    old_open, new_open = old_lines.ends_unterminated, new_lines.ends_unterminated
    out = [f"--- {a_label if old is not None else '/dev/null'}\n", f"+++ {b_label if new is not None else '/dev/null'}\n"]
    for hunk in hunks:
        first, last = hunk[0], hunk[-1]
        lead = min(CONTEXT, first[0], first[2])
        trail = min(CONTEXT, n_old - last[1], n_new - last[3])
        o1, o2 = first[0] - lead, last[1] + trail
        n1, n2 = first[2] - lead, last[3] + trail
        out.append(f"@@ -{_range(o1, o2)} +{_range(n1, n2)} @@\n")
        i = o1
        for ci1, ci2, cj1, cj2 in hunk:
            _lines(out, " ", old_lines.span(i, ci1), False)
            _lines(out, "-", old_lines.span(ci1, ci2), ci2 == n_old and old_open)
            _lines(out, "+", new_lines.span(cj1, cj2), cj2 == n_new and new_open)
            i = ci2
        _lines(out, " ", old_lines.span(i, o2), o2 == n_old and old_open)
    return "".join(out)


def whole_file(old: str | None, new: str | None, a_label: str, b_label: str) -> str:
    """Diff for an Add (old may be None) or a Delete (new is None) of text files."""
    old_lines = Lines.parse(old) if old is not None else None
    new_lines = Lines.parse(new) if new is not None else None
    return unified(old_lines, new_lines, [], a_label, b_label)


def binary(a_label: str, b_label: str) -> str:
    return f"Binary files {a_label} and {b_label} differ\n"

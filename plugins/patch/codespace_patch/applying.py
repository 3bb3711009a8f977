"""Rewriting one file's text with an Update section's chunks (apply-patch.md §5).

All chunks are located first; only when every one is found is the new text
built, so one unmatched chunk leaves the file as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from .diagnose import context_hint, lines_hint
from .errors import ApplyError
from .line_endings import Lines
from .parser import Chunk
from .seek import Seeker


@dataclass(slots=True)
class Rewrite:
    old: Lines
    new: Lines
    # Runs of lines carried over unchanged, as (old start, new start, length):
    # what the unified diff needs to know, without diffing 20,000 lines again.
    kept: list[tuple[int, int, int]]

    def text(self) -> str:
        return self.new.render()


# An edit replaces ``length`` file lines at ``start`` with new texts. Context
# lines are never part of an edit: they keep the file's text and terminator,
# even when matched loosely, and the edits between them are ordered by position
# alone (a stable sort, so equal positions keep chunk order).
Edit = tuple[int, int, list[str]]


def rewrite(text: str, chunks: list[Chunk], path: str) -> Rewrite:
    """Apply ``chunks`` to ``text`` (the content of ``path``, for messages)."""
    old = Lines.parse(text)
    seeker = Seeker(old.texts)
    n = len(old.texts)
    edits: list[Edit] = []
    cursor = 0
    for number, chunk in enumerate(chunks, 1):
        if chunk.context:
            found = seeker.find([chunk.context], cursor)
            if found is None:
                hint, details = context_hint(old.texts, chunk, number, len(chunks), cursor, path)
                raise ApplyError(
                    f"Failed to find context '{chunk.context}' in {path}",
                    code="patch_context_not_found", hint=hint, details=details,
                )
            cursor = found + 1
        pattern = chunk.old
        if not pattern:
            # Pure insertions go after the last line, whatever the header said.
            edits.append((n, 0, [text for _, text in chunk.lines]))
            continue
        drop_old = drop_new = -1
        found = seeker.find(pattern, cursor, chunk.end_of_file)
        if found is None and pattern[-1] == "":
            # Upstream retries once without a trailing empty line (and without the
            # new side's trailing empty line, when it has one).
            drop_old = _last_index(chunk, "+")
            if chunk.new and chunk.new[-1] == "":
                drop_new = _last_index(chunk, "-")
            pattern = pattern[:-1]
            found = seeker.find(pattern, cursor, chunk.end_of_file)
        if found is None:
            hint, details = lines_hint(old.texts, chunk, number, len(chunks), cursor, path)
            raise ApplyError(
                f"Failed to find expected lines in {path}:\n" + "\n".join(chunk.old),
                code="patch_lines_not_found", hint=hint, details=details,
            )
        edits += _edits(chunk, found, drop_old, drop_new)
        cursor = found + len(pattern)
    edits.sort(key=lambda e: e[0])
    return _build(old, edits)


def _last_index(chunk: Chunk, excluded_kind: str) -> int:
    for index in range(len(chunk.lines) - 1, -1, -1):
        if chunk.lines[index][0] != excluded_kind:
            return index
    return -1


def _edits(chunk: Chunk, start: int, drop_old: int, drop_new: int) -> list[Edit]:
    """The chunk's runs of removed and added lines, at their file positions.

    ``drop_old``/``drop_new`` name the diff line whose old (new) side the retry
    without a trailing empty line left out: a context line losing its old side
    becomes an insertion, one losing its new side a removal.
    """
    edits: list[Edit] = []
    position = start
    run_start, removed, added = start, 0, []
    for index, (kind, text) in enumerate(chunk.lines):
        takes_old = kind != "+" and index != drop_old
        gives_new = kind != "-" and index != drop_new
        if takes_old and gives_new:
            if removed or added:
                edits.append((run_start, removed, added))
            position += 1
            run_start, removed, added = position, 0, []
            continue
        if takes_old:
            removed += 1
            position += 1
        elif gives_new:
            added.append(text)
    if removed or added:
        edits.append((run_start, removed, added))
    return edits


def _build(old: Lines, edits: list[Edit]) -> Rewrite:
    texts, terms = old.texts, old.terms
    preferred = old.preferred
    new_texts: list[str] = []
    new_terms: list[str] = []
    kept: list[tuple[int, int, int]] = []
    source = 0
    for start, length, added in edits:
        if start > source:
            kept.append((source, len(new_texts), start - source))
            new_texts += texts[source:start]
            new_terms += terms[source:start]
        new_texts += added
        new_terms += [preferred] * len(added)
        source = max(source, start + length)
    if source < len(texts):
        kept.append((source, len(new_texts), len(texts) - source))
        new_texts += texts[source:]
        new_terms += terms[source:]
    if not old.terminated:
        # Every line of an updated file ends with a terminator (upstream scenario 014);
        # only the old last line can lack one, wherever insertions moved it.
        new_terms = [t or preferred for t in new_terms]
    return Rewrite(old, Lines(new_texts, new_terms, preferred, True), kept)

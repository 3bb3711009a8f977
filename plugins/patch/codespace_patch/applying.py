"""Rewriting one file's text with an Update section's chunks (apply-patch.md §5).

The result is pure (text in, text out): one unmatched chunk fails the whole file
and nothing is written.

Two ways to get there, with one result. The common case (an LF-only file whose
last line is terminated, every chunk found by the exact pass, in file order) works
on the text itself: each chunk's lines joined are one substring search, and the
new text is the old one's untouched spans around the edits, so a 20,000-line file
is never split into lines. Anything else (CR endings, an unterminated last line, a
chunk that needs a looser pass or upstream's retry, a pure insertion, which goes
after the last line) takes the line-by-line path, which runs the four passes of
:mod:`codespace_patch.seek`.
"""

from __future__ import annotations

from codespace.contract.records import Record

from .errors import ApplyError

# The line path's modules (and the parser's types, for annotations) load where they are used:
# the helper's usual patch takes the text path, and each module costs it a quarter millisecond.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .line_endings import Lines
    from .parser import Chunk


class TextLines:
    """The lines of an LF-only, terminated text, located from known (line, offset)
    anchors: a diff asks only for lines at or next to an edit, so the text is never
    split whole."""

    __slots__ = ("text", "count", "_lines", "_offsets", "_at")
    ends_unterminated = False

    def __init__(self, text: str, count: int, anchors: list[tuple[int, int]]) -> None:
        self.text = text
        self.count = count
        points = [(0, 0), *anchors, (count, len(text))]  # sorted by line, as the edits are
        self._lines = [line for line, _ in points]
        self._offsets = [offset for _, offset in points]
        self._at = dict(points)

    def __len__(self) -> int:
        return self.count

    def render(self) -> str:
        return self.text

    def span(self, start: int, stop: int) -> str:
        """Lines ``start`` to ``stop`` as they stand in the text."""
        at = self._at
        begin = at.get(start)
        if begin is None:
            begin = self._walk_to(start)
        end = at.get(stop)
        if end is None:
            end = self._walk_to(stop)
        return self.text[begin:end]

    def _walk_to(self, line: int) -> int:
        """Where ``line`` starts, walking from the nearer anchor (a diff's context
        lines are at most a few lines from one)."""
        from bisect import bisect_right  # here: only a diff asks, and the helper makes none

        k = bisect_right(self._lines, line) - 1
        below, above = self._lines[k], self._lines[k + 1]
        text = self.text
        if line - below <= above - line:
            offset = self._offsets[k]
            for _ in range(line - below):
                offset = text.index("\n", offset) + 1
            return offset
        offset = self._offsets[k + 1]
        for _ in range(above - line):
            offset = text.rfind("\n", 0, offset - 1) + 1
        return offset


class Rewrite(Record):
    __slots__ = ("old", "new", "kept")
    old: Lines | TextLines
    new: Lines | TextLines
    # Runs of lines carried over unchanged, as (old start, new start, length):
    # what the unified diff needs to know, without diffing 20,000 lines again.
    kept: list[tuple[int, int, int]]

    def __init__(self, old: Lines | TextLines, new: Lines | TextLines, kept: list[tuple[int, int, int]]) -> None:
        self.old = old
        self.new = new
        self.kept = kept

    def text(self) -> str:
        return self.new.render()


# An edit replaces ``length`` file lines at ``start`` with new texts. Context
# lines are never part of an edit: they keep the file's text and terminator,
# even when matched loosely, and the edits between them are ordered by position
# alone (a stable sort, so equal positions keep chunk order).
Edit = tuple[int, int, list[str]]


def rewrite(text: str, chunks: list[Chunk], path: str) -> Rewrite:
    """Apply ``chunks`` to ``text`` (the content of ``path``, for messages)."""
    if text.endswith("\n") and "\r" not in text:
        done = _rewrite_text(text, chunks)
        if done is not None:
            return done
    return rewrite_by_lines(text, chunks, path)


# -- the text path ------------------------------------------------------------------


def _find_lines(text: str | bytes, block: str | bytes, offset: int, nl: str | bytes = "\n") -> int:
    """The first line start at or after ``offset`` where ``block`` (whole lines, each
    with its LF) stands in ``text``; -1 when none does."""
    while True:
        found = text.find(block, offset)  # type: ignore[arg-type]
        if found <= 0 or text[found - 1:found] == nl:
            return found
        offset = found + 1


def _exact_blocks(
    text: str | bytes, chunks: list[Chunk], as_bytes: bool = False,
) -> tuple[list[tuple[int, int, Chunk]], int] | None:
    """Where each chunk's block stands, found by the exact pass in file order: (its first
    line's number, its offset, the chunk) each, and the text's line count; None as soon
    as one is not found, or for a pure insertion (it goes after the last line, out of
    file order). ``text`` is an LF-only, terminated str, or (``as_bytes``) such a text's
    ASCII bytes, which the chunks' lines are encoded to match."""
    nl = b"\n" if as_bytes else "\n"
    size = len(text)
    cursor = 0  # offset of the first line a chunk may match, a line start
    line = counted = 0  # ``line`` is the number of the line starting at offset ``counted``
    found_blocks = []
    for chunk in chunks:
        if chunk.context:
            context = chunk.context + "\n"
            found = _find_lines(text, context.encode("utf-8", "surrogatepass") if as_bytes else context, cursor, nl)
            if found < 0:
                return None
            cursor = found + len(chunk.context) + 1  # an ASCII match: as many bytes as characters
        pattern = chunk.old
        if not pattern:
            return None
        block: str | bytes = "\n".join(pattern) + "\n"
        if as_bytes:
            block = block.encode("utf-8", "surrogatepass")  # type: ignore[union-attr]
        if chunk.end_of_file:
            found = size - len(block)
            if found < cursor or not text.endswith(block) or (found and text[found - 1:found] != nl):  # type: ignore[arg-type]
                return None
        else:
            found = _find_lines(text, block, cursor, nl)
            if found < 0:
                return None
        if not as_bytes:  # the byte path keeps no line numbers: it makes no diff
            line += text.count(nl, counted, found)  # type: ignore[arg-type]
            counted = found
        found_blocks.append((line, found, chunk))
        cursor = found + len(block)
    return found_blocks, (0 if as_bytes else line + text.count(nl, counted))  # type: ignore[arg-type]


def _rewrite_text(text: str, chunks: list[Chunk]) -> Rewrite | None:
    """The rewrite when every chunk is found by the exact pass (:func:`_exact_blocks`), else None."""
    located = _exact_blocks(text, chunks)
    if located is None:
        return None
    blocks, count = located
    built = _TextBuilder(text)
    for line, found, chunk in blocks:
        for first, length, added, offset, end in _runs(chunk):
            built.edit(line + first, length, added, found + offset, found + end)
    return built.finish(count)


def rewrite_ascii(data: bytes, chunks: list[Chunk]) -> bytes | None:
    """What ``rewrite(data.decode(), chunks, path).text().encode("utf-8", "surrogatepass")``
    gives, for an ASCII, LF-only, terminated file whose chunks the exact pass finds in file
    order; None otherwise (the caller then takes :func:`rewrite`, which also says why a
    chunk did not match). No diff can be made of it: for a caller that wants none (the
    helper process), this spares decoding the file, encoding the result and the diff's
    bookkeeping. The same as the text path byte for byte: an ASCII file holds a chunk's
    lines only where its text does, at the same offsets (a line with other characters is
    found in neither), and the kept spans and added lines are the same bytes either way."""
    if not (data.isascii() and data.endswith(b"\n")) or b"\r" in data:
        return None
    located = _exact_blocks(data, chunks, as_bytes=True)
    if located is None:
        return None
    # Kept spans are views, not copies: slicing bytes copies them, and in a one-shot process
    # each fresh copy of a big file costs its page faults again (0.2-0.4 ms of 700 KB).
    view = memoryview(data)
    pieces: list[bytes | memoryview] = []
    source = 0  # the first byte not yet carried over
    for _, found, chunk in located[0]:
        for _, _, added, offset, end in _runs(chunk):
            pieces.append(view[source:found + offset])
            if added:
                pieces.append(("\n".join(added) + "\n").encode("utf-8", "surrogatepass"))
            source = found + end
    pieces.append(view[source:])
    return b"".join(pieces)


class _TextBuilder:
    """The new text and the diff's bookkeeping, built edit by edit in file order."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pieces: list[str] = []
        self.kept: list[tuple[int, int, int]] = []
        self.old_anchors: list[tuple[int, int]] = []
        self.new_anchors: list[tuple[int, int]] = []
        self.source = self.source_offset = 0  # the first old line (and offset) not yet carried over
        self.new_line = self.new_offset = 0

    def edit(self, start: int, length: int, added: list[str], offset: int, end: int) -> None:
        """Lines ``start`` to ``start + length`` (text ``offset`` to ``end``) become ``added``."""
        if start > self.source:
            self.kept.append((self.source, self.new_line, start - self.source))
            self.pieces.append(self.text[self.source_offset:offset])
            self.new_line += start - self.source
            self.new_offset += offset - self.source_offset
        self.old_anchors += ((start, offset), (start + length, end))
        self.new_anchors.append((self.new_line, self.new_offset))
        if added:
            inserted = "\n".join(added) + "\n"
            self.pieces.append(inserted)
            self.new_line += len(added)
            self.new_offset += len(inserted)
        self.new_anchors.append((self.new_line, self.new_offset))
        self.source, self.source_offset = start + length, end

    def finish(self, count: int) -> Rewrite:
        if self.source < count:
            self.kept.append((self.source, self.new_line, count - self.source))
            self.pieces.append(self.text[self.source_offset:])
            self.new_line += count - self.source
        new_text = "".join(self.pieces)
        return Rewrite(
            TextLines(self.text, count, self.old_anchors), TextLines(new_text, self.new_line, self.new_anchors), self.kept
        )


# -- the line path --------------------------------------------------------------------


def rewrite_by_lines(text: str, chunks: list[Chunk], path: str) -> Rewrite:
    """:func:`rewrite` line by line, every pass available."""
    from .line_endings import Lines
    from .seek import Seeker

    old = Lines.parse(text)
    seeker = Seeker(old.texts)
    n = len(old.texts)
    edits: list[Edit] = []
    cursor = 0
    for number, chunk in enumerate(chunks, 1):
        if chunk.context:
            found = seeker.find([chunk.context], cursor)
            if found is None:
                from .diagnose import context_hint  # on the failure path only: it loads collections

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
            from .diagnose import lines_hint

            hint, details = lines_hint(old.texts, chunk, number, len(chunks), cursor, path)
            raise ApplyError(
                f"Failed to find expected lines in {path}:\n" + "\n".join(chunk.old),
                code="patch_lines_not_found", hint=hint, details=details,
            )
        edits += [(found + first, length, added) for first, length, added, _, _ in _runs(chunk, drop_old, drop_new)]
        cursor = found + len(pattern)
    edits.sort(key=lambda e: e[0])
    return _build(old, edits)


def _last_index(chunk: Chunk, excluded_kind: str) -> int:
    for index in range(len(chunk.lines) - 1, -1, -1):
        if chunk.lines[index][0] != excluded_kind:
            return index
    return -1


def _runs(chunk: Chunk, drop_old: int = -1, drop_new: int = -1) -> list[tuple[int, int, list[str], int, int]]:
    """The chunk's runs of removed and added lines, relative to its matched block:
    (first old line, old lines removed, texts added, and the run's start and end as
    character offsets in the block, each old line counted with one terminator).

    ``drop_old``/``drop_new`` name the diff line whose old (new) side the retry
    without a trailing empty line left out: a context line losing its old side
    becomes an insertion, one losing its new side a removal.
    """
    lines = chunk.lines if drop_old < 0 and drop_new < 0 else _without_sides(chunk.lines, drop_old, drop_new)
    runs: list[tuple[int, int, list[str], int, int]] = []
    position = offset = 0
    run_start, run_offset, removed, added = 0, 0, 0, []
    for kind, text in lines:
        if kind == "+":
            added.append(text)
            continue
        if kind == " " and (removed or added):
            runs.append((run_start, removed, added, run_offset, offset))
            removed, added = 0, []
        position += 1
        offset += len(text) + 1
        if kind == " ":
            run_start, run_offset = position, offset
        else:
            removed += 1
    if removed or added:
        runs.append((run_start, removed, added, run_offset, offset))
    return runs


def _without_sides(lines: list[tuple[str, str]], drop_old: int, drop_new: int) -> list[tuple[str, str]]:
    """``lines`` with line ``drop_old`` losing its old side and ``drop_new`` its new one."""
    out = []
    for index, (kind, text) in enumerate(lines):
        takes_old = kind != "+" and index != drop_old
        gives_new = kind != "-" and index != drop_new
        if takes_old or gives_new:
            out.append((" " if takes_old and gives_new else "-" if takes_old else "+", text))
    return out


def _build(old: Lines, edits: list[Edit]) -> Rewrite:
    from .line_endings import Lines

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

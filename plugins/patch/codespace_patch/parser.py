"""The V4A patch grammar exactly as Codex 0.171.0 accepts it (apply-patch.md §2-§3).

Parsing is pure: text in, sections out, or a :class:`ParseError` carrying
upstream's message and line number. Line numbers count from the
``*** Begin Patch`` line of the trimmed patch (of the inner patch when a heredoc
wrapper was removed).
"""

from __future__ import annotations

from codespace.contract.records import Fields, Record, field

from .errors import LINE_PREFIXES, VALID_HEADERS, ParseError
from .rust_text import is_blank, trim, trim_end

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
ENVIRONMENT_ID = "*** Environment ID:"
HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')

FIRST_LINE = "The first line of the patch must be '*** Begin Patch'"
LAST_LINE = "The last line of the patch must be '*** End Patch'"


class Chunk(Record):
    """One ``@@`` chunk: an optional context header and its diff lines as
    ``(kind, text)`` pairs, kind being ``" "``, ``"-"`` or ``"+"``."""

    __slots__ = ("context", "line", "lines", "end_of_file")
    context: str
    line: int
    lines: list[tuple[str, str]]
    end_of_file: bool

    def __init__(self, context: str, line: int, lines: list[tuple[str, str]] | None = None,
                 end_of_file: bool = False) -> None:
        self.context = context
        self.line = line
        self.lines = [] if lines is None else lines
        self.end_of_file = end_of_file

    @property
    def old(self) -> list[str]:
        return [text for kind, text in self.lines if kind != "+"]

    @property
    def new(self) -> list[str]:
        return [text for kind, text in self.lines if kind != "-"]


class AddFile(Fields):
    __slots__ = ()
    _fields = ("path", "contents", "line")

    def __new__(cls, path: str, contents: str, line: int) -> AddFile:
        return tuple.__new__(cls, (path, contents, line))

    path: str = field(0)  # type: ignore[assignment]
    contents: str = field(1)  # type: ignore[assignment]
    line: int = field(2)  # type: ignore[assignment]


class DeleteFile(Fields):
    __slots__ = ()
    _fields = ("path", "line")

    def __new__(cls, path: str, line: int) -> DeleteFile:
        return tuple.__new__(cls, (path, line))

    path: str = field(0)  # type: ignore[assignment]
    line: int = field(1)  # type: ignore[assignment]


class UpdateFile(Record):
    __slots__ = ("path", "line", "move_to", "chunks", "closed_by_eof")
    path: str
    line: int
    move_to: str | None
    chunks: list[Chunk]
    closed_by_eof: bool  # set after '*** End of File': only blank lines or a new '@@' may follow

    def __init__(self, path: str, line: int, move_to: str | None = None, chunks: list[Chunk] | None = None,
                 closed_by_eof: bool = False) -> None:
        self.path = path
        self.line = line
        self.move_to = move_to
        self.chunks = [] if chunks is None else chunks
        self.closed_by_eof = closed_by_eof


Section = AddFile | DeleteFile | UpdateFile


class Patch(Fields):
    __slots__ = ()
    _fields = ("sections", "environment_id")

    def __new__(cls, sections: tuple[Section, ...], environment_id: str | None = None) -> Patch:
        return tuple.__new__(cls, (sections, environment_id))

    sections: tuple[Section, ...] = field(0)  # type: ignore[assignment]
    environment_id: str | None = field(1)  # type: ignore[assignment]


def parse_patch(text: str) -> Patch:
    """Parse ``text``; raise :class:`ParseError` with upstream's message."""
    lines = _split(trim(text))
    problem = _envelope_problem(lines)
    if problem is not None:
        # The lenient heredoc form is only tried when the plain form fails, and
        # then its own envelope errors are the ones reported.
        if len(lines) >= 4 and lines[0] in HEREDOC_OPENERS and lines[-1].endswith("EOF"):
            lines = lines[1:-1]
            problem = _envelope_problem(lines)
        if problem is not None:
            raise ParseError.envelope(problem)
    return _Body(lines).parse()


def _split(text: str) -> list[str]:
    if not text:
        return []
    if "\r" not in text:
        return text.split("\n")
    return [line.rstrip("\r") for line in text.split("\n")]


def _envelope_problem(lines: list[str]) -> str | None:
    if not lines:
        return LAST_LINE
    if trim(lines[0]) != BEGIN:
        return FIRST_LINE
    if trim(lines[-1]) != END:
        return LAST_LINE
    return None


def _is_section_header(line: str) -> bool:
    return line.startswith(ADD) or line.startswith(DELETE) or line.startswith(UPDATE)


def _unexpected(raw: str) -> str:
    return f"Unexpected line found in update hunk: '{raw}'. {LINE_PREFIXES}"


def _expected_marker(raw: str) -> str:
    return f"Expected update hunk to start with a @@ context marker, got: '{raw}'"


class _Body:
    """The section state machine over the lines between Begin and the final End."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.sections: list[Section] = []
        self.environment_id: str | None = None
        self.add: tuple[str, int, list[str]] | None = None
        self.update: UpdateFile | None = None

    def parse(self) -> Patch:
        lines = self.lines
        last = len(lines) - 1
        i = 1
        while i < last:
            raw = lines[i]
            number = i + 1
            update = self.update
            if update is not None and raw and raw[0] in " -+" and not update.closed_by_eof:
                # The common case, decided without the full rule list: a diff line can
                # be neither a marker nor a header (those start with '*' or '@'). The
                # whole run of such lines is taken at once.
                if not update.chunks:
                    update.chunks.append(Chunk("", number))
                append = update.chunks[-1].lines.append
                while True:
                    append((raw[0], raw[1:]))
                    i += 1
                    if i >= last:
                        break
                    raw = lines[i]
                    if not raw or raw[0] not in " -+":
                        break
                continue
            if update is not None:
                stripped = trim_end(raw)
                if not (_is_section_header(stripped) or stripped == END):
                    self._update_line(raw, stripped, number)
                    i += 1
                    continue
                self._close_update(stripped, number)
            elif self.add is not None:
                if raw.startswith("+"):
                    self.add[2].append(raw[1:])
                    i += 1
                    continue
                self._close_add()
            if self._top_level(raw, number):
                # An End Patch before the final line: only blank lines may follow it.
                if not all(is_blank(line) for line in lines[i + 1:last]):
                    raise ParseError.envelope(LAST_LINE)
                return self._finish()
            i += 1
        # The final line is the End Patch the envelope check accepted, whatever its padding.
        if self.update is not None:
            self._close_update(END, len(lines))
        elif self.add is not None:
            self._close_add()
        return self._finish()

    def _finish(self) -> Patch:
        return Patch(tuple(self.sections), self.environment_id)

    # -- top level, and after Add / Delete sections ---------------------------------

    def _top_level(self, raw: str, number: int) -> bool:
        """Handle a line where a section header is expected; True at End Patch."""
        line = trim(raw)
        if line == END:
            return True
        if line.startswith(ADD):
            self.add = (line[len(ADD):], number, [])
        elif line.startswith(DELETE):
            self.sections.append(DeleteFile(line[len(DELETE):], number))
        elif line.startswith(UPDATE):
            self.update = UpdateFile(line[len(UPDATE):], number)
        elif not self.sections and line.startswith(ENVIRONMENT_ID):
            if self.environment_id is not None:
                raise ParseError.envelope("apply_patch environment_id cannot be specified more than once")
            value = trim(line[len(ENVIRONMENT_ID):])
            if not value:
                raise ParseError.envelope("apply_patch environment_id cannot be empty")
            self.environment_id = value
        else:
            raise ParseError.hunk(number, f"'{line}' is not a valid hunk header. {VALID_HEADERS}")
        return False

    def _close_add(self) -> None:
        assert self.add is not None
        path, number, contents = self.add
        self.sections.append(AddFile(path, "".join(f"{text}\n" for text in contents), number))
        self.add = None

    # -- inside an Update section --------------------------------------------------

    def _close_update(self, stripped: str, number: int) -> None:
        update = self.update
        assert update is not None
        if not update.chunks:
            raise ParseError.hunk(update.line, f"Update file hunk for path '{update.path}' is empty")
        if not update.chunks[-1].lines:
            if stripped == END:
                raise ParseError.hunk(number, "Update hunk does not contain any lines")
            raise ParseError.hunk(number, _unexpected(stripped))  # a header is quoted trimmed, as upstream does
        self.sections.append(update)
        self.update = None

    def _update_line(self, raw: str, stripped: str, number: int) -> None:
        update = self.update
        assert update is not None
        chunks = update.chunks
        is_header = stripped == "@@" or stripped.startswith("@@ ")
        if update.closed_by_eof:
            if not stripped:
                return
            if not is_header:
                raise ParseError.hunk(number, _expected_marker(raw))
        if not chunks and update.move_to is None and stripped.startswith(MOVE):
            update.move_to = stripped[len(MOVE):]
            return
        if is_header:
            # A header directly after another ('stacked' @@) leaves an empty chunk.
            if chunks and not chunks[-1].lines:
                raise ParseError.hunk(number, _unexpected(raw))
            chunks.append(Chunk(stripped[3:], number))
            update.closed_by_eof = False
            return
        if stripped == END_OF_FILE:
            if not chunks:
                return  # upstream passes over it: it ends no chunk, and a Move may still follow
            if not chunks[-1].lines:
                raise ParseError.hunk(number, "Update hunk does not contain any lines")
            chunks[-1].end_of_file = True
            update.closed_by_eof = True
            return
        if not raw or raw[0] in " -+":
            if not chunks:
                chunks.append(Chunk("", number))
            chunks[-1].lines.append((raw[0], raw[1:]) if raw else (" ", ""))
            return
        if chunks and chunks[-1].lines:
            raise ParseError.hunk(number, _expected_marker(raw))
        raise ParseError.hunk(number, _unexpected(raw))

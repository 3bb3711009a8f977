"""Turn rg's JSON records into matches with their context, in path order, within the budget.

rg searches files in parallel and prints each file's records together, files in no
fixed order. (Its ``--sort path`` would give an order, but its one-thread walker
opens a directory before the override globs can skip it: a directory the policy
hides would be listed. So rg runs unsorted and the order is made here.) Each
finished file is placed by its path's components, byte-wise, and the tail beyond
``max_matches``/``max_bytes`` is dropped as files arrive: what is kept is exactly
the first page of the sorted whole, and memory stays near the budget. Once the page
is full (or below a cursor), most files of a big search cannot be on it: the reader
hands the buffer to :meth:`Collector.pass_over`, which passes over runs of such files
with one pattern search for their begin records and one count for binary ones, instead
of a Python pass per record (benchmarks/README.md, grep).

rg prints each context line once, even when it lies between two matches; a line
goes to the match before it when it is within that match's ``after`` lines, else it
waits for the next match as one of its ``before`` lines.
"""

from __future__ import annotations

import base64
import bisect
import json
import re

from .grep_cursor import Position, order_key

# JSON around each item, spaced as json.dumps spaces it (the larger of the usual encodings):
ITEM_OVERHEAD = 104    # {"path": "", "line_number": N, "line": "", "before": [], "after": []}, "line_truncated": true
CONTEXT_OVERHEAD = 44  # {"line_number": N, "line": ""},
FIXED = 420            # the result's own fields, the cursor, a truncation reason
MAX_SKIPPED = 50
_BEGIN = b'{"type":"begin","data":{"path":{"text":"'
# A begin record, found anywhere in rg's output (its quotes are raw, so it is never inside a
# string), with the path when the path is plain text needing no unescaping; else group 1 is None.
_BEGIN_AT = re.compile(rb'\{"type":"begin","data":\{"path":\{"(?:text":"([^"\\\n]*)"\}\}\}\n)?')
_PLAIN_END = b'"binary_offset":null,'


def _raw(field: dict) -> bytes:
    text = field.get("text")
    return text.encode("utf-8", "surrogateescape") if text is not None else base64.b64decode(field["bytes"])


def shown(raw: bytes) -> str:
    """Text JSON can carry: bytes that are not UTF-8 become ``\\xNN``."""
    return raw.decode("utf-8", "backslashreplace")


def size_of(text: str) -> int:
    if text.isascii() and text.isprintable():
        return len(text)
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


LINKED = ("it has several hard links, and the policy forbids reading such files (rule filesystem.hardlinks = "
          "'refuse'): not searched")


class _File:
    __slots__ = ("key", "raw", "shown", "items", "sizes", "pending", "open", "open_line", "cut")

    def __init__(self, raw: bytes) -> None:
        self.key, self.raw, self.shown = order_key(raw), raw, shown(raw)
        self.items: list[dict] = []
        self.sizes: list[int] = []
        self.pending: list[dict] = []
        self.open: dict | None = None
        self.open_line = 0
        self.cut = False  # matches of it were left off the page


class Collector:
    def __init__(self, *, before: int, after: int, max_matches: int, max_bytes: int, max_line_chars: int,
                 resume: Position | None, single_name: bytes | None, searched: str, linked=None) -> None:  # noqa: ANN001
        """``linked(raw path)``: whether a file is left out as having several hard links
        (``filesystem.hardlinks = 'refuse'``): its lines are dropped unread, and it is listed as skipped."""
        self.before, self.after = before, after
        self.max_bytes, self.max_matches = max_bytes, max_matches
        self.budget = max_bytes - FIXED - size_of(searched)
        self.max_line_chars = max_line_chars
        self.resume = resume.key() if resume is not None else None
        self.single_name = single_name
        self.linked = linked
        self.kept: list[_File] = []
        self._keys: list[tuple] = []
        self.count = 0
        self.used = 0
        self.dropped: str | None = None   # which limit dropped something
        self.skipped: list[dict] = []
        self.binary_files = 0
        self.saw_output = False
        self._file: _File | None = None
        self._skipping: str | None = None
        # The page's bounds as bytes that compare as the keys do (components joined by NUL,
        # a byte no path holds and below every other): see pass_over.
        self._low = b"\0".join(self.resume[0]) if self.resume is not None else None
        self._high_of: tuple | None = None
        self._high = b""

    def _skip(self, file: _File) -> str | None:
        if self.resume is not None and file.key < self.resume[0]:
            return "before"
        if self._beyond_the_page(file):
            return "after"
        return None

    def feed(self, record: bytes) -> None:
        kind = record[9:11]  # after '{"type":"': "ma"tch, "co"ntext, "be"gin, "en"d, "su"mmary
        if self._skipping and (kind == b"ma" or kind == b"co"):
            # A file wholly before the cursor or after a full page: nothing of it is kept, so
            # its lines are not decoded (most of a big search's records, past the first page).
            if kind == b"ma" and self._skipping == "after":
                self._file.cut = True
            return
        if kind == b"en" and b'"binary_offset":null,' in record:
            # The common end of a file, known without decoding it (a path holding this text
            # would have its quotes escaped).
            self.finish_file()
            self._skipping = None
            return
        if kind == b"be" and record.startswith(_BEGIN) and record.endswith(b'"}}}') and b"\\" not in record:
            self._begin(record[len(_BEGIN):-4])  # a path with no escape in it is its own text
            return
        message = json.loads(record)
        kind = message.get("type")
        data = message.get("data", {})
        if kind == "match":
            self._match(data)
        elif kind == "context":
            self._context(data)
        elif kind == "begin":
            self._begin(_raw(data["path"]))
        elif kind == "end":
            if data.get("binary_offset") is not None and self._file is not None:
                self.binary_files += 1  # its lines are binary content: none are returned
                self._file = None
            self.finish_file()
            self._skipping = None
        elif kind == "summary":
            self.saw_output = True

    def _begin(self, raw: bytes) -> None:
        self.saw_output = True
        if self.single_name is not None:
            raw = self.single_name
        self._file = _File(raw[2:] if raw.startswith(b"./") else raw)
        if self.linked is not None and self.linked(self._file.raw):
            self._skipping = "linked"
            if len(self.skipped) < MAX_SKIPPED:
                self.skipped.append({"path": self._file.shown, "reason": LINKED})
            return
        self._skipping = self._skip(self._file)
        if self._skipping == "after":
            self._file.cut = True  # rg begins a file only for a match: one is left off the page

    def pass_over(self, buf: bytes, pos: int) -> int:
        """Pass over the whole files at ``buf[pos:]`` that nothing of can be on this page
        (before the cursor, or after a full page), and return where the first file that
        could be, or the last one begun in ``buf``, begins. Their records are not read one
        by one: of a file passed over only whether rg found it binary counts, and that is
        counted in bulk. Past a full page this is nearly every file of a big search."""
        if self._file is not None or self.single_name is not None or not buf.startswith(_BEGIN, pos):
            return pos
        low = self._low
        high = self._high_bound()
        if low is None and high is None:
            return pos
        stop, files = pos, 0
        # files: how many begins come before the one at stop, each a whole file in buf[pos:stop]
        for files, found in enumerate(_BEGIN_AT.finditer(buf, pos)):
            stop = found.start()
            path = found.group(1)
            if path is None:
                break  # escaped, not UTF-8, or not all in buf yet: read the usual way
            key = (path[2:] if path.startswith(b"./") else path).replace(b"/", b"\0")
            if not ((low is not None and key < low) or (high is not None and key > high)):
                break
        if files > 0:
            self.saw_output = True
            # Each file passed over has one end record, and the common one says it is not binary.
            self.binary_files += files - buf.count(_PLAIN_END, pos, stop)
        return stop

    def _high_bound(self) -> bytes | None:
        """The last kept key as bytes once the page is full (what _beyond_the_page compares)."""
        if self.dropped is None or not self._keys:
            return None
        last = self._keys[-1]
        if last is not self._high_of:
            self._high_of, self._high = last, b"\0".join(last)
        return self._high

    def skipping(self) -> bool:
        """Whether the records up to the current file's end can go unread."""
        return self._skipping is not None

    def oversize(self) -> None:
        if len(self.skipped) < MAX_SKIPPED:
            where = self._file.shown if self._file is not None else "(unknown)"
            self.skipped.append({"path": where, "reason": "a matching or context line longer than 4 MiB was left out"})

    def _line(self, data: dict) -> tuple[int, str, bool]:
        text = shown(_raw(data["lines"])).rstrip("\n")
        if text.endswith("\r"):
            text = text[:-1]
        cut = len(text) > self.max_line_chars
        return data["line_number"], text[: self.max_line_chars] if cut else text, cut

    def _beyond_the_page(self, file: _File) -> bool:
        """Whether nothing of ``file`` can be on this page: the page is full of earlier files."""
        return self.dropped is not None and bool(self._keys) and file.key > self._keys[-1]

    def _match(self, data: dict) -> None:
        file = self._file
        if file is None:
            return
        number, text, cut = self._line(data)
        if (self.resume is not None and (file.key, number) <= self.resume) or self._beyond_the_page(file):
            file.pending, file.open = [], None
            if self.resume is None or (file.key, number) > self.resume:
                file.cut = True
            return
        before = [c for c in file.pending if number - c["line_number"] <= self.before]
        file.pending = []
        item = {"path": file.shown, "line_number": number, "line": text, "before": before, "after": []}
        if cut:
            item["line_truncated"] = True
        file.items.append(item)
        file.sizes.append(ITEM_OVERHEAD + size_of(file.shown) + size_of(text)
                          + sum(CONTEXT_OVERHEAD + size_of(c["line"]) for c in before))
        file.open, file.open_line = item, number
        if len(file.items) > self.max_matches + 1 or sum(file.sizes) > 2 * self.budget + 100_000:
            self._drop_last(file)  # this file alone overflows the page: its tail cannot be on it

    def _context(self, data: dict) -> None:
        file = self._file
        if file is None:
            return
        number, text, _ = self._line(data)
        entry = {"line_number": number, "line": text}
        if file.open is not None and number - file.open_line <= self.after:
            file.open["after"].append(entry)
            if file.items and file.items[-1] is file.open:
                file.sizes[-1] += CONTEXT_OVERHEAD + size_of(text)
            return
        file.open = None
        file.pending.append(entry)
        if len(file.pending) > self.before:
            del file.pending[0]

    def _drop_last(self, file: _File) -> None:
        file.items.pop()
        file.sizes.pop()
        file.open = None
        file.cut = True

    def finish_file(self) -> None:
        """File the current file in path order, then cut the page back to the limits."""
        file, self._file = self._file, None
        if file is not None and file.cut:
            self.dropped = self.dropped or "max_matches or max_bytes"
        if file is None or not file.items:
            return
        at = bisect.bisect(self._keys, file.key)
        self._keys.insert(at, file.key)
        self.kept.insert(at, file)
        self.count += len(file.items)
        self.used += sum(file.sizes)
        self._trim()

    def _trim(self) -> None:
        while self.count > 1 and (self.count > self.max_matches or self.used > self.budget):
            self.dropped = f"max_matches ({self.max_matches})" if self.count > self.max_matches \
                else f"max_bytes ({self.max_bytes} bytes of response)"
            last = self.kept[-1]
            last.items.pop()
            self.used -= last.sizes.pop()
            self.count -= 1
            if not last.items:
                self.kept.pop()
                self._keys.pop()
        if self.count == 1 and self.used > self.budget:
            self._shrink_only_item()

    def _shrink_only_item(self) -> None:
        """The first match always goes out, cut to fit, so each page makes progress."""
        file = self.kept[0]
        item = file.items[0]
        item["before"], item["after"] = [], []
        room = max(20, self.budget - ITEM_OVERHEAD - size_of(file.shown))
        if size_of(item["line"]) > room:
            item["line"], item["line_truncated"] = item["line"][:room], True
        self.used = file.sizes[0] = ITEM_OVERHEAD + size_of(file.shown) + size_of(item["line"])
        self.dropped = self.dropped or f"max_bytes ({self.max_bytes} bytes of response)"

    def matches(self) -> list[dict]:
        return [item for file in self.kept for item in file.items]

    def files(self) -> int:
        return len(self.kept)

    def last(self) -> Position | None:
        if not self.kept:
            return None
        file = self.kept[-1]
        return Position(file.raw, file.items[-1]["line_number"])

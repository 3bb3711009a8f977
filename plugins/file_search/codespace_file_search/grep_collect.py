"""Turn rg's JSON records into matches with their context, within the budget.

rg prints each context line once, even when it lies between two matches; a line
goes to the match before it when it is within that match's ``after`` lines, else it
waits for the next match as one of its ``before`` lines.
"""

from __future__ import annotations

import base64
import json

from .grep_cursor import Position, order_key

ITEM_OVERHEAD = 90   # {"path":"","line_number":,"line":"","before":[],"after":[]}, and a number
CONTEXT_OVERHEAD = 32


def _raw(field: dict) -> bytes:
    text = field.get("text")
    return text.encode("utf-8", "surrogateescape") if text is not None else base64.b64decode(field["bytes"])


def shown(raw: bytes) -> str:
    """Text JSON can carry: bytes that are not UTF-8 become ``\\xNN``."""
    return raw.decode("utf-8", "backslashreplace")


def _size(text: str) -> int:
    if text.isascii() and text.isprintable():
        return len(text)
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


class Collector:
    def __init__(self, *, before: int, after: int, max_matches: int, max_bytes: int, max_line_chars: int,
                 resume: Position | None, single_name: bytes | None) -> None:
        self.before, self.after = before, after
        self.max_matches, self.budget = max_matches, max_bytes - 300  # the result's own fields
        self.max_line_chars = max_line_chars
        self.resume = resume.key() if resume is not None else None
        self.single_name = single_name
        self.matches: list[dict] = []
        self.files: set[bytes] = set()
        self.skipped: list[dict] = []
        self.used = 0
        self.last: Position | None = None
        self.truncated_reason: str | None = None
        self._path: bytes = b""
        self._path_shown = ""
        self._key: tuple = ()
        self._pending: list[dict] = []
        self._open: dict | None = None   # the last match returned, still taking after-context
        self._open_line = 0
        self.saw_output = False

    def feed(self, record: bytes) -> bool:
        """Take one record; False once a limit is reached (stop reading)."""
        message = json.loads(record)
        kind = message.get("type")
        data = message.get("data", {})
        if kind == "begin":
            self.saw_output = True
            self._begin(data)
        elif kind == "match":
            return self._match(data)
        elif kind == "context":
            return self._context(data)
        elif kind == "summary":
            self.saw_output = True
        return True

    def oversize(self) -> None:
        self.skipped.append({"path": self._path_shown or "(unknown)",
                             "reason": "a matching or context line longer than 4 MiB was left out"})

    def _begin(self, data: dict) -> None:
        raw = self.single_name if self.single_name is not None else _raw(data["path"])
        if raw.startswith(b"./"):
            raw = raw[2:]
        self._path, self._path_shown, self._key = raw, shown(raw), order_key(raw)
        self._pending = []
        self._open = None

    def _line(self, data: dict) -> tuple[int, str, bool]:
        text = shown(_raw(data["lines"])).rstrip("\n")
        if text.endswith("\r"):
            text = text[:-1]
        cut = len(text) > self.max_line_chars
        return data["line_number"], text[: self.max_line_chars] if cut else text, cut

    def _match(self, data: dict) -> bool:
        number, text, cut = self._line(data)
        if self.resume is not None and (self._key, number) <= self.resume:
            self._pending, self._open = [], None
            return True
        before = [c for c in self._pending if number - c["line_number"] <= self.before]
        self._pending = []
        item = {"path": self._path_shown, "line_number": number, "line": text, "before": before, "after": []}
        if cut:
            item["line_truncated"] = True
        size = ITEM_OVERHEAD + _size(self._path_shown) + _size(text) + sum(
            CONTEXT_OVERHEAD + _size(c["line"]) for c in before)
        if len(self.matches) >= self.max_matches:
            self.truncated_reason = f"max_matches ({self.max_matches})"
            return False
        if self.used + size > self.budget:
            if self.matches:
                self.truncated_reason = f"max_bytes ({self.budget + 300} bytes of response)"
                return False
            item["before"] = []  # the first match always goes out, cut to fit, so each page makes progress
            room = max(20, self.budget - ITEM_OVERHEAD - _size(self._path_shown))
            if _size(text) > room:
                item["line"], item["line_truncated"] = text[:room], True
            size = ITEM_OVERHEAD + _size(self._path_shown) + _size(item["line"])
        self.used += size
        self.matches.append(item)
        self.files.add(self._path)
        self.last = Position(self._path, number)
        self._open, self._open_line = item, number
        return True

    def _context(self, data: dict) -> bool:
        number, text, _ = self._line(data)
        entry = {"line_number": number, "line": text}
        if self._open is not None and number - self._open_line <= self.after:
            size = CONTEXT_OVERHEAD + _size(text)
            if self.used + size > self.budget:
                self.truncated_reason = f"max_bytes ({self.budget + 300} bytes of response)"
                return False
            self.used += size
            self._open["after"].append(entry)
            return True
        self._open = None
        self._pending.append(entry)
        if len(self._pending) > self.before:
            del self._pending[0]
        return True

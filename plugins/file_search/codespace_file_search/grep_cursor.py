"""The continuation cursor: where the last returned match was, and for which search.

Matches are ordered by (the path's components, byte-wise; line number), the order of
a depth-first walk with names sorted in each directory: on an unchanged tree every
run gives the same sequence, and a (path, line) pair is a position in it. A cursor names the last
match returned and a fingerprint of the arguments that define the search, so a
cursor from another search is refused instead of silently skipping the wrong things.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass

from codespace.contract import ToolError

from .grep_models import GrepArgs

_PREFIX = "g1."
# What defines the sequence of matches; limits (max_*, timeout) may change between pages.
_IDENTITY = ("pattern", "path", "literal", "case", "include", "exclude", "gitignore", "include_hidden",
             "context", "before", "after")


@dataclass(frozen=True)
class Position:
    path: bytes
    line_number: int

    def key(self) -> tuple[tuple[bytes, ...], int]:
        return order_key(self.path), self.line_number


def order_key(path: bytes) -> tuple[bytes, ...]:
    return tuple(path.split(b"/"))


def fingerprint(args: GrepArgs) -> str:
    identity = json.dumps([getattr(args, name) for name in _IDENTITY], ensure_ascii=False)
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def encode(args: GrepArgs, position: Position) -> str:
    body = [fingerprint(args), base64.b64encode(position.path).decode(), position.line_number]
    return _PREFIX + base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def decode(args: GrepArgs) -> Position | None:
    """The position ``args.cursor`` names, or None without a cursor."""
    raw = args.cursor
    if raw is None:
        return None
    try:
        if not raw.startswith(_PREFIX):
            raise ValueError("prefix")
        text = raw[len(_PREFIX):]
        fp, path, line = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        position = Position(base64.b64decode(path, validate=True), int(line))
    except (ValueError, TypeError) as exc:
        raise ToolError(
            "cursor is not one grep returned (it cannot be decoded). To proceed: pass next_cursor exactly as "
            "an earlier grep call returned it, or leave cursor out to start from the beginning.",
            code="invalid_argument", details={"argument": "cursor"},
        ) from exc
    if fp != fingerprint(args):
        raise ToolError(
            "cursor belongs to a different search: pattern, path, globs, case, gitignore, include_hidden and "
            "context must be the same as in the call that returned it. To proceed: repeat that call's "
            "arguments with the cursor, or leave cursor out to start a new search.",
            code="invalid_argument", details={"argument": "cursor"},
        )
    return position

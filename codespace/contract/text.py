"""Names shown in a tool's text answer, one entry a line whatever a file is called.

A file name may hold any byte but ``/`` and NUL: a newline, a carriage return, a
terminal escape, a Unicode control that reverses what follows. Shown as it is, a name
such as ``a\\nsrc/main.py:1:match`` reads as two entries, one of them forged, to a model
that reads the text block (found by testing from outside: grep, list_dir, walk and
find_files all showed one). :func:`one_line` writes such characters as escapes, as the
names that are not UTF-8 already are (``\\xNN``); structured content keeps the name as
it is, since JSON escapes what it must.

Stable (part of the plugin API, versioned with ``codespace.contract``): :func:`one_line`.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; the line and paragraph separators; the marks and
# embeddings that reorder or hide text (bidirectional controls, zero-width joiners and
# the byte order mark are left out: they do not move text, and names in scripts that
# need them are common).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(name: str) -> str:
    """``name`` with every character that could end a line, move the cursor or reorder the
    text around it written as ``\\xNN`` or ``\\uNNNN``; other names are returned as they are."""
    return _UNSAFE.sub(_escape, name) if _UNSAFE.search(name) else name

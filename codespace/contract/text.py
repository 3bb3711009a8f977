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
# embeddings that reorder text (bidirectional controls); and what shows as nothing: the
# soft hyphen, zero-width space, word joiner and invisible operators, the byte order mark,
# the Mongolian vowel separator and the tag characters (which can carry hidden ASCII to a
# model; found by testing from outside). The zero-width (non-)joiners stay: scripts and
# emoji sequences need them in names.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b\u200e\u200f\u2028-\u202e"
                     "\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def one_line(name: str) -> str:
    """``name`` with every character that could end a line, move the cursor, reorder the text
    around it or show as nothing written as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``; other names
    are returned as they are."""
    return _UNSAFE.sub(_escape, name) if _UNSAFE.search(name) else name


def in_message(message: str) -> str:
    """An error message for the text block: what :func:`one_line` escapes, but the line
    breaks a message may hold on purpose (a regex error's caret under the pattern). A path
    the message names shows its escape sequences, carriage returns and bidirectional marks as
    escapes (found by testing from outside: read_file's error echoed them raw)."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() == "\n" else _escape(m), message)


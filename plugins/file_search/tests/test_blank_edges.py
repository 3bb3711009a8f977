"""An anchored atom skips blanks at a path's ends as nucleo trims them: in an ASCII path only
space, tab, newline, form feed and carriage return (Rust's ``is_ascii_whitespace``), not the
vertical tab or \\x1c-\\x1f that Python's ``isspace`` also holds. Answers recorded from codex
0.171.0's app-server (fuzzyFileSearch) on a tree of these names."""

from __future__ import annotations

import pytest

from codespace_file_search.query import parse
from codespace_file_search.ranking import rank

NAMES = ["main\x0b", "main\x1c", "main ", "main\x0c", "\x0bmain", "\x1cmain", " main", "xmain"]


def _entries() -> list[tuple[str, str, bool]]:
    return [("", "", True), *((name, name, False) for name in NAMES)]


@pytest.mark.parametrize("query, expected", [
    ("^main$", [(" main", 104), ("main\x0c", 109), ("main ", 109)]),
    ("main$", [("\x0bmain", 104), ("\x1cmain", 104), (" main", 104), ("main\x0c", 109), ("main ", 109),
               ("xmain", 76)]),
    ("^main", [(" main", 104), ("main\x0b", 109), ("main\x0c", 109), ("main\x1c", 109), ("main ", 109)]),
])
def test_anchored_atoms_skip_only_nucleos_ascii_blanks(query, expected):
    found, total = rank(parse(query), _entries(), memo={})
    assert sorted((r.path, r.score) for r in found) == sorted(expected)
    assert total == len(expected)

"""rank() against answers the pinned binary's fuzzyFileSearch gave (recorded from codex
0.171.0's app-server on these trees; pin_check.py re-derives such cases against the binary).
Each case is a behaviour a simpler matcher gets wrong."""

from __future__ import annotations

import pytest

from codespace_file_search.query import parse
from codespace_file_search.ranking import rank


def _entries(*paths: str) -> list[tuple[str, str, bool]]:
    out = [("", "", True)]
    for path in paths:
        is_dir = path.endswith("/")
        path = path.rstrip("/")
        out.append((path, path.rsplit("/", 1)[-1], is_dir))
    return out


def _ranked(query: str, *paths: str) -> list[tuple]:
    found, _ = rank(parse(query), _entries(*paths))
    return [(r.path, r.score, r.indices) for r in found]


@pytest.mark.parametrize("query, paths, expected", [
    # A file the query tiers is scored on its name: the name's match, placed in the path.
    ("a", ["xa/", "xa/ya/", "xa/ya/za"], [("xa/ya/za", 65552, [7]), ("xa", 16, [1]), ("xa/ya", 16, [1])]),
    ("r", ["deep/", "deep/er/", "deep/er/.gitignore"],
     [("deep/er/.gitignore", 65552, [16]), ("deep/er", 16, [6])]),
    ("main", ["d_main/", "d_main/mxaxixn"], [("d_main/mxaxixn", 65609, [7, 9, 11, 13]), ("d_main", 104, [2, 3, 4, 5])]),
    # One directory only is lifted to tier 2: the best-scored, then the shortest.
    ("main", ["p/", "p/main/", "q/", "q/main/", "rr/", "rr/main/"],
     [("p/main", 131181, [2, 3, 4, 5]), ("q/main", 109, [2, 3, 4, 5]), ("rr/main", 109, [3, 4, 5, 6])]),
    ("main", ["main_x/", "ab/", "ab/main/", "mainfile"],
     [("ab/main", 131181, [3, 4, 5, 6]), ("mainfile", 65645, [0, 1, 2, 3]), ("main_x", 109, [0, 1, 2, 3])]),
    # No tier for several atoms or an operator.
    ("ab cd", ["ab/", "ab/ab cd"], [("ab/ab cd", 115, [3, 4, 6, 7])]),
    ("main$", ["main/", "main/main"], [("main", 109, [0, 1, 2, 3]), ("main/main", 109, [5, 6, 7, 8])]),
    # A backslash anywhere in the query, escaping or not, takes the tiers away.
    ("\\", ["back\\slash"], [("back\\slash", 32, [4])]),
    ("\\$", ["dollar$"], [("dollar$", 32, [6])]),
    ("y", ["x\\y"], [("x\\y", 65568, [2])]),
    # A one-character atom in a non-ASCII path judges each occurrence against the previous
    # occurrence's class (here: no bonus for the 'r' after '.'), in the name cut from it too.
    ("r", ["Ωmegadrs/", "Ωmegadrs/foo_bar.rs"], [("Ωmegadrs/foo_bar.rs", 65552, [15]), ("Ωmegadrs", 16, [6])]),
])
def test_ranks_as_upstream(query, paths, expected):
    assert _ranked(query, *paths) == expected


def test_a_query_of_only_negations_lists_the_root_with_zero():
    assert _ranked("!q", "main/", "main/xmain/", "main/xmain/q", "main/ymain") == [
        ("", 0, []), ("main", 0, []), ("main/xmain", 0, []), ("main/ymain", 0, [])]

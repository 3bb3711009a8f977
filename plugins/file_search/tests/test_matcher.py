"""The matcher against scores the pinned binary's fuzzyFileSearch gave (recorded from runs of
codex 0.171.0's app-server on these paths; pin_check.py re-derives them against the binary)."""

from __future__ import annotations

import pytest

from codespace_file_search.query import parse, score, tier


@pytest.mark.parametrize("query, path, expected", [
    ("main", "Main.txt", (109, [0, 1, 2, 3])),
    ("main", ".hidden/main.py", (109, [8, 9, 10, 11])),
    ("src", "src/Foo/main.rs", (84, [0, 1, 2])),
    ("rs$", "src/Foo/main.rs", (56, [13, 14])),
    ("!md m", "Main.txt", (34, [0])),
    ("src main", "src/Foo/main.rs", (193, [0, 1, 2, 8, 9, 10, 11])),
    ("abc", "a/aBcD", (84, [2, 3, 4])),
    ("abc", "a/b cd", (77, [0, 2, 4])),
    ("12", "a/ab12", (47, [4, 5])),
    ("cafe", "a/CAFÉ.txt", (109, [2, 3, 4, 5])),
    ("é", "a/CAFÉ.txt", (16, [5])),
    ("b\\ cd", "a/b cd", (109, [2, 3, 4, 5])),
    ("zq", "a/b/c/zq1", (59, [6, 7])),
])
def test_scores_match_upstream(query, path, expected):
    assert score(parse(query), path) == expected


@pytest.mark.parametrize("query, path", [
    ("café", "a/cafe"), ("!md", "readme.md"), ("^rs", "src/main.rs"), ("zz", "z"), ("'mian", "main"),
    ("main$", "main.rs"),
])
def test_non_matches(query, path):
    assert score(parse(query), path) is None


@pytest.mark.parametrize("query, name, is_dir, expected", [
    ("main", "Main", False, 3), ("main", "Main", True, 2), ("main", "main.py", False, 1),
    ("src", "xsrcx", True, 0), ("cafe", "café", False, 3), (" ", "a b", False, 0), ("'main", "main.py", False, 0),
])
def test_tiers(query, name, is_dir, expected):
    assert tier(parse(query), name, is_dir) == expected


def test_whitespace_only_query_matches_everything_with_zero():
    assert score(parse("   "), "any/path") == (0, [])

"""rank()'s shortcuts (the prefilter's one pattern per atom over all paths, tiers from the
last path component, a tier's rest counted once the cut is full, an anchored atom scored
once per window) against the plain definition: score every entry with ``q.ranked``, keep
the best by (score, fewer components, path), lift the one directory the query names.
Trees are generated to hit the shortcuts' edges: equal scores at the cut, blanks at a
path's ends, tabs and newlines in names, non-ASCII paths, names equal to the query."""

from __future__ import annotations

import random

import pytest

from codespace_file_search import query as q
from codespace_file_search.ranking import rank

PARTS = ["main", "Main", "ma", "in", "rs", ".rs", "x.rs", "_", "a", "src", "util", " ", "\t", "\n",
         "é", "Ü", "\x1c", "m", "n", "1", "mod", "MAIN", "ma-in", "\\", "$", "^", "'"]
QUERIES = ["main", "rs$", "^ma", "^main$", "'ai", "m", "ma in", "main !src", "!x", "mai$", "^src", "rs",
           "é", "in$", "^ ma", "rs $", "'in", "main\\", "\\^ma", "\\$", "1"]


def _tree(rng: random.Random) -> list[tuple[str, str, bool]]:
    entries = [("", "", True)]
    dirs = [""]
    for _ in range(rng.randint(5, 90)):
        name = "".join(rng.choice(PARTS) for _ in range(rng.randint(1, 3))).replace("/", "")
        parent = rng.choice(dirs)
        path = f"{parent}/{name}" if parent else name
        if any(e[0] == path for e in entries):
            continue
        is_dir = rng.random() < 0.3
        entries.append((path, name, is_dir))
        if is_dir:
            dirs.append(path)
    rng.shuffle(entries)
    return entries


def _plain(query: q.Query, entries: list[tuple[str, str, bool]], limit: int) -> tuple[list[tuple], int]:
    scored, named = [], None
    for path, name, is_dir in entries:
        found = q.ranked(query, path, name, is_dir)
        if found is None:
            continue
        scored.append((found[0], path, found[1]))
        if is_dir and q.names_dir(query, name):
            rival = (-found[0], len(path), path, found)
            named = rival if named is None or rival[:3] < named[:3] else named
    order = lambda s: (-s[0], s[1].count("/"), s[1])  # noqa: E731
    best = sorted(scored, key=order)[:limit]
    if named is not None:
        path, found = named[2], named[3]
        best = [s for s in best if s[1] != path] + [((2 << 16) + found[0], path, found[1])]
        best = sorted(best, key=order)[:limit]
    return sorted(best, key=lambda s: (-s[0], s[1])), len(scored)


@pytest.mark.parametrize("seed", range(40))
def test_shortcuts_answer_as_the_plain_definition(seed):
    rng = random.Random(seed)
    entries = _tree(rng)
    memo: dict = {}  # one memo across the queries, as a kept walk is reused
    for text in QUERIES:
        query = q.parse(text)
        for limit in (1, 3, 50):
            found, total = rank(query, entries, limit, memo=memo)
            expected, count = _plain(query, entries, limit)
            assert [(r.score, r.path, r.indices) for r in found] == expected, (text, limit)
            assert total == count, (text, limit)


def test_many_equal_scores_at_the_cut_keep_the_shallowest_then_first():
    entries = [("", "", True)]
    for d in range(30):
        entries.append((f"d{d:02}", f"d{d:02}", True))
        for f in range(20):
            entries.append((f"d{d:02}/f{f:02}.rs", f"f{f:02}.rs", False))
    entries.append(("z.rs", "z.rs", False))
    for text in ("rs$", "rs", "'rs", "f0"):
        found, total = rank(q.parse(text), entries, 50, memo={})
        expected, count = _plain(q.parse(text), entries, 50)
        assert [(r.score, r.path, r.indices) for r in found] == expected, text
        assert total == count, text

"""grep on an output of many files, most of which cannot be on the page: the files passed over
in bulk (grep_collect.Collector.pass_over) must leave every answer as reading each record does.

The expected answer is computed here from the files the test writes, not from grep: the matching
lines in path order (components compared byte-wise), and the binary files that match."""

from __future__ import annotations

import os
import random

import pytest

from codespace_file_search.grep_models import GrepArgs
from codespace_file_search.grep_search import search

_ODD = (b'q"uote', b"back\\slash", b"\xffnot-utf8", b"tab\tname")


def _write(path: bytes, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def big(ws):
    """About 2,500 matching files (several MiB of rg output, so many reads), binary ones and
    names rg must escape scattered among them. Answers the expected matches and binary count."""
    rng = random.Random(15)
    root = os.fsencode(str(ws))
    expected, binary = [], 0
    for d in range(40):
        rel_dir = b"d%02d" % d + (b"/sub" if d % 3 == 0 else b"")
        os.makedirs(root + b"/" + rel_dir)
        for f in range(62):
            name = (_ODD[f % len(_ODD)] if f % 15 == 7 else b"f") + b"%02d.txt" % f
            rel = rel_dir + b"/" + name
            if f % 29 == 3:
                _write(root + b"/" + rel, b"needle in a binary file\n\0\x01\x02needle\n")
                binary += 1
                continue
            lines = [b"needle %d %d %d %s" % (d, f, j, b"x" * rng.randint(50, 400)) if rng.random() < 0.5
                     else b"hay" for j in range(rng.randint(1, 6))]
            lines.append(b"needle last of %d %d" % (d, f))
            _write(root + b"/" + rel, b"\n".join(lines) + b"\n")
            expected += [(tuple(rel.split(b"/")), n, rel.decode("utf-8", "backslashreplace"), line.decode())
                         for n, line in enumerate(lines, 1) if line.startswith(b"needle")]
    expected.sort()
    return [item[1:] for item in expected], binary


def _page(workspace, ws, **kwargs):
    args = GrepArgs(pattern="needle", path=str(ws), max_line_chars=1000, **kwargs)
    result = search(args, workspace.paths, workspace.limits)
    return result, [(m["line_number"], m["path"], m["line"]) for m in result["matches"]]


def _all_pages(workspace, ws, binary, **kwargs):
    got, cursor, pages = [], None, 0
    while True:
        result, matches = _page(workspace, ws, **kwargs, **({"cursor": cursor} if cursor else {}))
        assert result["binary_files_skipped"] == binary  # every file rg found binary, on every page
        got += matches
        pages += 1
        cursor = result["next_cursor"]
        assert result["truncated"] == (cursor is not None)
        if cursor is None:
            return got, pages


def test_pages_past_a_full_page_are_the_whole(make_workspace, ws, big):
    expected, binary = big
    workspace = make_workspace()
    whole, matches = _page(workspace, ws, max_matches=100_000, max_bytes=8 * 1024 * 1024)
    assert matches == [(n, p, line) for n, p, line in expected]
    assert not whole["truncated"] and whole["binary_files_skipped"] == binary and binary > 0
    by_count, pages = _all_pages(workspace, ws, binary, max_matches=400, max_bytes=8 * 1024 * 1024)
    assert by_count == matches and pages == -(-len(expected) // 400)
    by_bytes, pages = _all_pages(workspace, ws, binary, max_bytes=16 * 1024)
    assert by_bytes == matches and pages > 10


def test_a_page_exactly_as_long_as_what_is_left(make_workspace, ws, big):
    expected, binary = big
    workspace = make_workspace()
    total = len(expected)
    exact, matches = _page(workspace, ws, max_matches=total, max_bytes=8 * 1024 * 1024)
    assert len(matches) == total and not exact["truncated"] and exact["next_cursor"] is None
    short, matches = _page(workspace, ws, max_matches=total - 1, max_bytes=8 * 1024 * 1024)
    assert len(matches) == total - 1 and short["truncated_reason"] == f"max_matches ({total - 1})"
    rest, last = _page(workspace, ws, max_matches=total - 1, max_bytes=8 * 1024 * 1024, cursor=short["next_cursor"])
    assert last == [expected[-1]] and not rest["truncated"] and rest["binary_files_skipped"] == binary
    # From a cursor near the end, a page of exactly what is left is whole, one less is cut.
    _, first = _page(workspace, ws, max_matches=total - 5, max_bytes=8 * 1024 * 1024)
    cursor = _page(workspace, ws, max_matches=total - 5, max_bytes=8 * 1024 * 1024)[0]["next_cursor"]
    tail, matches = _page(workspace, ws, max_matches=5, cursor=cursor)
    assert first + matches == list(expected) and not tail["truncated"]
    cut, matches = _page(workspace, ws, max_matches=4, cursor=cursor)
    assert matches == list(expected[-5:-1]) and cut["truncated"]


def test_truncation_exactly_at_the_byte_budget(make_workspace, ws, big):
    """The largest page a budget holds, and one byte less: each continues where it stopped."""
    expected, binary = big
    workspace = make_workspace()
    low, high = 1024, 64 * 1024  # the fewest bytes for which the first page holds 40 matches
    while low < high:
        middle = (low + high) // 2
        if len(_page(workspace, ws, max_bytes=middle)[1]) >= 40:
            high = middle
        else:
            low = middle + 1
    for budget in (low, low - 1):
        first, matches = _page(workspace, ws, max_bytes=budget)
        assert len(matches) == (40 if budget == low else 39)
        assert first["truncated_reason"] == f"max_bytes ({budget} bytes of response)"
        second, more = _page(workspace, ws, max_bytes=budget, cursor=first["next_cursor"])
        assert matches + more == list(expected[: len(matches) + len(more)])
        assert second["binary_files_skipped"] == binary

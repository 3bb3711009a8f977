"""The pin check itself, against the pinned binary (skipped when it is not in the cache)."""

from __future__ import annotations

import pytest

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary
from codespace_file_search.pin import compare, pin_check


def test_compare_lists_only_the_deliberate_differences():
    row = ("a", "file", 10, [0])
    assert compare([row], [row]) == (None, None)
    detail, listed = compare([row], [row, ("outward/main", "file", 9, [0])])
    assert listed and "outward" in detail
    detail, listed = compare([row], [("a", "file", 11, [0])])
    assert listed is None and "#0" in detail


def test_pin_check_runs_against_the_binary():
    try:
        codex = codex_binary("0.171.0", fetch=False)
    except OracleUnavailable as exc:
        pytest.skip(str(exc))
    report = pin_check().run(PinCheckRequest(release="rust-v0.171.0", codex=codex, seed=171, cases=5,
                                             log=lambda line: None))
    assert report.unavailable is None and report.cases == 20


def test_the_readme_lists_every_accepted_difference_and_no_other():
    from pathlib import Path

    from codespace_file_search.pin import LISTED

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text.split("Differences from upstream that the check accepts", 1)[1].split("Known and not generated", 1)[0]
    bullets = [line[2:].strip() for line in section.splitlines() if line.startswith("- ")]
    assert bullets == list(LISTED)


ODD_NAMES = ["line\nbreak.txt", "a.*b", "[x]", "back\\slash", "dollar$", "^caret", "quote'd", "tab\tname",
             "café.md", "CAFE.md", "plain.txt"]
ODD_QUERIES = ["break", "line break", ".*", "[x", "\\", "$", "r$", "\\$", "^\\^c", "'quote'", "!txt a", "cafe",
               "café", "a" * 300, "\t", "ab\\ b"]


def test_odd_names_and_pattern_syntax_agree_with_the_binary(tmp_path):
    from codespace_file_search.pin import ours, theirs
    from codespace_file_search.pin_client import AppServer

    try:
        codex = codex_binary("0.171.0", fetch=False)
    except OracleUnavailable as exc:
        pytest.skip(str(exc))
    root = tmp_path / "root"
    root.mkdir()
    for name in ODD_NAMES:
        (root / name).write_text("x")
    with AppServer(codex) as server:
        for query in ODD_QUERIES:
            assert ours(query, str(root)) == theirs(server, query, str(root)), query

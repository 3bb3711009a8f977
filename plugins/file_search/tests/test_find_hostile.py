"""find_files at its boundaries, through a real in-process MCP server: names that would break
a newline-joined buffer or a regex, queries made of pattern syntax, and a query long enough
to make the alignment matrix large. Each answer is checked against scoring the path alone."""

from __future__ import annotations

import pytest

from codespace.testing import call_ok
from codespace_file_search.query import parse, score

pytestmark = pytest.mark.anyio


@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("file_search",)


NAMES = ["line\nbreak.txt", "a.*b", "[x]", "back\\slash", "dollar$", "^caret", "quote'd", "tab\tname",
         "café.md", "CAFE.md", "plain.txt"]


@pytest.mark.parametrize("query", ["break", "line break", ".*", "[x", "\\", "$", "r$", "\\$", "^\\^c",
                                   "'quote'", "!txt a", "cafe", "café", "a" * 300, "\t", "ab\\ b"])
async def test_odd_names_and_pattern_syntax(ws, mcp_client, query):
    ws.mkdir(exist_ok=True)
    for name in NAMES:
        (ws / name).write_text("x")
    async with mcp_client() as client:
        got = await call_ok(client, "find_files", {"query": query})
    parsed = parse(query)
    listed = {f["path"] for f in got["files"]}
    # The root is an entry too (as upstream lists it): it matches a query of only negations.
    expected = {name for name in ["", *NAMES] if score(parsed, name) is not None}
    assert listed == expected
    assert got["total_matches"] == len(expected)


async def test_a_newline_in_a_name_does_not_shift_other_entries(ws, mcp_client):
    ws.mkdir(exist_ok=True)
    (ws / "first\nsecond").write_text("x")
    (ws / "second_only").write_text("x")
    async with mcp_client() as client:
        got = await call_ok(client, "find_files", {"query": "second"})
    assert {f["path"] for f in got["files"]} == {"first\nsecond", "second_only"}

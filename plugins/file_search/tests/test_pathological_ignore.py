"""find_files with a workspace's ``.ignore`` full of stars: pathspec's regex of ``********z``
takes minutes on a 60-character name, with the server stalled (codespace.contract.globs)."""

from __future__ import annotations

from stdio_support import raw_calls

STARRED = ["*" * 8 + "z", "*a" * 7 + "*q", "/".join(["**", "a"] * 5) + "/**/q", "*" * 30 + "/y"]


def test_find_files_finishes_with_pathological_ignore_patterns(ws, state):
    """Each of a few hundred names would take the unguarded regex minutes to hours."""
    (ws / ".ignore").write_text("\n".join(STARRED) + "\n")
    deep = ws.joinpath(*["a"] * 30)
    deep.mkdir(parents=True)
    (deep / "q").write_text("x")  # ignored by the third pattern
    (deep / "kept_deep").write_text("x")
    for n in range(150):
        (ws / f"{'a' * 60}{n:03}").write_text("x")  # kept: no pattern matches
        (ws / f"{'a' * 60}{n:03}z").write_text("x")  # ignored by the first
        (ws / f"{'a' * 60}{n:03}q").write_text("x")  # ignored by the second
    (found,) = raw_calls(ws, state, [("find_files", {"query": "aaa", "limit": 50})], timeout=60)
    (every,) = raw_calls(ws, state, [("find_files", {"query": "kept_deep"})], timeout=60)
    result = found["structuredContent"]
    assert not result["truncated"]
    # the kept names, the directories a/a/a to 30 deep (an "aaa" subsequence), kept_deep
    assert result["total_matches"] == 150 + 28 + 1
    assert all(not f["path"].endswith(("z", "q")) for f in result["files"])
    assert [f["path"] for f in every["structuredContent"]["files"]] == ["/".join(["a"] * 30) + "/kept_deep"]

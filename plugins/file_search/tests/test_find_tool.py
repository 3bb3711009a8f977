"""find_files through a real in-process MCP server: ranking, policy-hidden paths, links out of
the root, truncation, cancellation and bad arguments."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from codespace.testing import call_error, call_ok
from conftest import running_code_names
from codespace_file_search.walk import walk

pytestmark = pytest.mark.anyio


@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("file_search",)


def _touch(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")


async def test_ranks_as_upstream(ws, mcp_client):
    _touch(ws, "main", "d/Main", "Mainx", "src/Foo/main.rs")
    (ws / "Main").mkdir()
    async with mcp_client() as client:
        got = await call_ok(client, "find_files", {"query": "main"})
    # Scores as the pinned binary's fuzzyFileSearch gives them for this tree.
    assert [(f["path"], f["match_type"], f["score"], f["indices"]) for f in got["files"]] == [
        ("d/Main", "file", 196717, [2, 3, 4, 5]), ("main", "file", 196717, [0, 1, 2, 3]),
        ("Main", "directory", 131181, [0, 1, 2, 3]), ("Mainx", "file", 65645, [0, 1, 2, 3]),
        ("src/Foo/main.rs", "file", 65645, [8, 9, 10, 11]),
    ]
    assert got["root"] == str(ws) and not got["truncated"] and got["total_matches"] == 5


async def test_policy_hidden_paths_never_appear(ws, mcp_client):
    _touch(ws, "main.py", "secret/main.py", "secret/deeper/main_notes.txt", "main_token.txt", "ok/main.md")
    os.symlink("secret", ws / "main_link")  # a link into the hidden area: not listed either
    policy = '[filesystem]\npaths = { "secret" = "none", "main_token.txt" = "none" }\n'
    async with mcp_client(policy=policy) as client:
        for query in ("main", "secret", "token", " ", "!zzz"):
            got = await call_ok(client, "find_files", {"query": query})
            paths = [f["path"] for f in got["files"]]
            assert not [p for p in paths if "secret" in p or "token" in p or "main_link" in p], (query, paths)
        assert [f["path"] for f in (await call_ok(client, "find_files", {"query": "main"}))["files"]] == [
            "main.py", "ok/main.md"]
        err = await call_error(client, "find_files", {"query": "main", "path": "secret"})
        assert "refused by policy" in err["message"] and "secret" in err["message"]


async def test_a_path_that_turned_into_a_link_into_hidden_paths_is_refused_unnamed(make_workspace, ws, tmp_path):
    """The gateway judged the path; by the time the tool resolves it, it is a link to a link
    inside a hidden area (a command can swap it in a loop: 54 of 600 calls caught it). The
    refusal names the rule, never where the links lead."""
    from types import SimpleNamespace

    from codespace.contract import ToolError
    from codespace_file_search.find_tool import FindFilesArgs, find_files

    hidden = tmp_path / "hidden"
    (hidden / "very" / "secret").mkdir(parents=True)
    os.symlink(hidden / "very" / "secret" / "id_ed25519", hidden / "current_key")
    os.symlink(hidden / "current_key", ws / "sub")
    workspace = make_workspace(f'[filesystem]\npaths = {{ "{hidden}" = "none" }}\n')
    with pytest.raises(ToolError) as caught:
        await find_files(SimpleNamespace(workspace=workspace), FindFilesArgs(query="x", path=str(ws / "sub")))
    assert caught.value.code == "refused" and "hides" in caught.value.message, caught.value.message
    assert "very" not in caught.value.message and "id_ed25519" not in caught.value.message, caught.value.message


async def test_links_out_of_the_root_are_not_entered(ws, tmp_path, mcp_client):
    outside = tmp_path / "outside"
    _touch(outside, "main_outside.txt")
    _touch(ws, "real/main_inside.txt")
    os.symlink(outside, ws / "out")
    os.symlink("real", ws / "inner")
    async with mcp_client() as client:
        got = await call_ok(client, "find_files", {"query": "main"})
    paths = [f["path"] for f in got["files"]]
    assert "out/main_outside.txt" not in paths and not [p for p in paths if "outside" in p]
    assert sorted(paths) == ["inner/main_inside.txt", "real/main_inside.txt"]  # inside the root: followed


@pytest.mark.parametrize("hidden_q", ["absent", "directory", "file", "link to ../pub", "link to ../pub/d"])
async def test_which_links_are_listed_says_nothing_of_a_hidden_directory(ws, mcp_client, hidden_q):
    """Found by testing from outside: realpath went through the hidden secret/ to resolve each link,
    so which links were listed (and entered) told whether secret/q was a link and where it led.
    A link whose way looks inside secret/ is not listed now, whatever secret/q is."""
    _touch(ws, "a.txt")
    _touch(ws, "pub/d/qmarker.txt")
    (ws / "secret").mkdir()
    if hidden_q == "directory":
        (ws / "secret" / "q").mkdir()
    elif hidden_q == "file":
        (ws / "secret" / "q").write_text("q")
    elif hidden_q != "absent":
        os.symlink(hidden_q.removeprefix("link to "), ws / "secret" / "q")
    for name, target in {"xq": "../secret/q/../../a.txt", "yq": "../secret/q/../a.txt", "zq": "../secret/q",
                         "loopq": "../secret/q/../../pub/loopq", "okq": "d"}.items():
        os.symlink(target, ws / "pub" / name)
    async with mcp_client(policy='[filesystem.paths]\n"secret" = "none"\n') as client:
        got = await call_ok(client, "find_files", {"query": "q", "path": "pub"})
    assert sorted(f["path"] for f in got["files"]) == ["d/qmarker.txt", "okq", "okq/qmarker.txt"], got["files"]


async def test_truncation_is_reported(ws, mcp_client):
    _touch(ws, *[f"d{i}/f{j}.txt" for i in range(5) for j in range(5)])
    async with mcp_client(policy="[limits]\nwalk_max_entries = 7\n") as client:
        got = await call_ok(client, "find_files", {"query": "f"})
    assert got["truncated"] and "max_entries" in got["truncated_reason"] and got["entries_walked"] == 7


@pytest.mark.parametrize("kind", ["files", "links"])
async def test_the_walks_time_bound_is_the_policys(ws, mcp_client, kind):
    """limits.walk_max_ms bounds find_files' walk as it does the walk tool's (10 s by default),
    within a directory too: each entry below an ignore file of 2,000 patterns costs 2-4 ms to
    match, a link as much as a file (found in review: links were not counted)."""
    from codespace_file_search.walk_ignore import MAX_WALK_PATTERNS

    (ws / ".ignore").write_text("".join(f"dir{i}/**/*.x{i}\n" for i in range(MAX_WALK_PATTERNS - 1)))
    if kind == "files":
        _touch(ws, *[f"d/f{j}.txt" for j in range(5000)])
    else:
        _touch(ws, "target.txt")
        (ws / "d").mkdir()
        for j in range(5000):
            os.symlink("../target.txt", ws / "d" / f"f{j}.txt")
    async with mcp_client(policy="[limits]\nwalk_max_ms = 1500\n") as client:
        start = time.monotonic()
        got = await call_ok(client, "find_files", {"query": "f"})
        elapsed = time.monotonic() - start
    assert got["truncated"] and got["truncated_reason"].startswith("walk_max_ms (1500 ms of walking)"), got
    assert elapsed < 7, elapsed  # unbounded: about 12 s (the warm-up walk and the search each stop at the bound)


async def test_ignore_files_past_the_walks_pattern_budget_are_not_compiled(ws, mcp_client):
    """Found by testing: two 1 MiB ignore files of 48,678 patterns each, which any command can
    write, kept one find_files busy for 50 s (pathspec compiles each pattern in the server),
    past the walk's own 10 s bound. A walk compiles at most MAX_WALK_PATTERNS now; a file past
    that is not applied, as one over 1 MiB is not."""
    from codespace_file_search.walk_ignore import MAX_WALK_PATTERNS

    _touch(ws, ".git/HEAD", "keep.c", "drop.log", "big/x.tmp", "big/y.c")
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "big" / ".ignore").write_text("".join(f"dir{i}/**/*.x{i}\n" for i in range(MAX_WALK_PATTERNS)) + "*.tmp\n")
    async with mcp_client() as client:
        start = time.monotonic()
        got = await call_ok(client, "find_files", {"query": "c"})
        found = await call_ok(client, "find_files", {"query": "tmp"})
        elapsed = time.monotonic() - start
        logs = await call_ok(client, "find_files", {"query": "log"})
    assert elapsed < 5, elapsed
    paths = [f["path"] for f in got["files"]]
    assert "keep.c" in paths and "big/y.c" in paths
    assert [f["path"] for f in found["files"]] == ["big/x.tmp"]  # big/.ignore was not applied
    assert "drop.log" not in [f["path"] for f in logs["files"]]  # the root's small one was


@pytest.mark.parametrize("arguments, words", [
    ({"query": ""}, "query"),
    ({"query": "a", "limit": 0}, "limit"),
    ({"query": "a", "limit": 51}, "limit"),
    ({"query": "a", "unknown": 1}, "unknown"),
    ({"query": "a", "path": "file.txt"}, "not one"),
    ({"query": "a", "path": "missing"}, "missing"),
])
async def test_bad_arguments_get_clear_errors(ws, mcp_client, arguments, words):
    _touch(ws, "file.txt")
    async with mcp_client() as client:
        err = await call_error(client, "find_files", arguments)
        assert words in err["message"], err
        assert (await call_ok(client, "find_files", {"query": "file"}))["files"]  # the server is still up


def test_walk_stops_when_cancelled(tmp_path):
    _touch(tmp_path, *[f"d{i}/f{j}" for i in range(20) for j in range(20)])
    cancel = threading.Event()
    cancel.set()
    walked = walk(str(tmp_path), cancel=cancel)
    assert walked.cancelled and walked.truncated == "cancelled" and len(walked.entries) < 50
    assert len(walk(str(tmp_path)).entries) == 1 + 20 + 400


@pytest.mark.in_process
async def test_a_client_that_cancels_stops_the_walk(ws, mcp_client, monkeypatch):
    """The client gives up on a long walk (notifications/cancelled): the walk thread must stop
    within moments, and the partial walk must not be kept for the next call. (The warm-up is
    off: its own walk of the tree would be kept.)"""
    import time

    import anyio

    from codespace_file_search import warm_up
    from codespace_file_search.walk_index import INDEX

    monkeypatch.setenv(warm_up.SWITCH, "off")

    for i in range(200):
        for j in range(100):
            os.makedirs(ws / f"d{i}" / f"e{j}")

    def walking() -> bool:
        return any(file.endswith(("walk.py", "ranking.py", "prefilter.py")) for file, _ in running_code_names())

    INDEX.clear()
    policy = "[limits]\nwalk_max_entries = 10000000\nwalk_max_dirs = 1000000\n"
    async with mcp_client(policy=policy) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "find_files", {"query": "zzz"})
            with anyio.fail_after(20):
                while not walking():
                    await anyio.sleep(0.001)
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        while walking() and time.monotonic() < cancelled_at + 30:
            await anyio.sleep(0.01)
        assert time.monotonic() - cancelled_at < 2, "the walk ran on after the call was cancelled"
        assert len(INDEX) == 0, "a walk that was cancelled (or ran to its end regardless) was kept"
        got = await call_ok(client, "find_files", {"query": "e99"})
    assert got["entries_walked"] == 200 * 101 + 1 and not got["truncated"]


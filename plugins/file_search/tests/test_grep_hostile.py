"""grep at its boundaries: hidden paths, links, odd names, FIFOs, huge lines, bad input, stopping."""

from __future__ import annotations

import os
import threading
import time

import anyio
import pytest

from codespace.contract import Refused, ToolError
from codespace.testing import call_error, call_ok
from codespace_file_search.grep_models import GrepArgs
from codespace_file_search.grep_search import search

from grep_support import OpenWatch, rg_children

pytestmark = pytest.mark.anyio


def _policy(outside) -> str:
    return (f'[filesystem]\npaths = {{ "secret" = "none", "odd*name[1].txt" = "none", '
            f'"{outside}" = "none" }}\n')


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside"
    path.mkdir()
    (path / "loot.txt").write_text("needle outside\n")
    return path


@pytest.fixture
def hostile(ws, outside):
    (ws / "secret" / "deeper").mkdir(parents=True)
    (ws / "secret" / "a.txt").write_text("needle secret\n")
    (ws / "secret" / "deeper" / "b.txt").write_text("needle deeper\n")
    (ws / "odd*name[1].txt").write_text("needle hidden by an exact rule\n")
    (ws / "oddXname1.txt").write_text("needle visible sibling\n")
    (ws / "notes.txt").write_text("needle notes\n")
    os.symlink("secret/a.txt", ws / "link_to_hidden")
    os.symlink("secret", ws / "link_to_hidden_dir")
    os.symlink(str(outside), ws / "link_out")
    os.symlink("/proc/self/root", ws / "procroot")
    os.symlink("/proc/self/fd", ws / "procfd")
    return ws


def _paths(result):
    return sorted({m["path"] for m in result["matches"]})


async def test_hidden_paths_are_never_opened_or_named(mcp_client, hostile, outside):
    watch = OpenWatch(hostile / "secret", hostile / "secret" / "deeper", hostile / "secret" / "a.txt",
                      hostile / "odd*name[1].txt", outside, outside / "loot.txt")
    try:
        async with mcp_client(policy=_policy(outside)) as client:
            result = await client.call_tool("grep", {"pattern": "needle", "context": 3})
            ignoring = await client.call_tool("grep", {"pattern": "needle", "include": ["secret/**"]})
        events = watch.events()
    finally:
        watch.close()
    assert events == [], f"rg opened a hidden path: {events}"
    assert _paths(result.structured_content) == ["notes.txt", "oddXname1.txt"]
    for text in (result.content[0].text, str(result.structured_content)):
        assert "secret" not in text and "odd*name" not in text and "outside" not in text
    assert ignoring.structured_content["matches"] == []  # the policy's exclusions win over include globs


async def test_search_path_that_leads_to_hidden_is_refused(mcp_client, hostile, outside):
    async with mcp_client(policy=_policy(outside)) as client:
        by_link = await call_error(client, "grep", {"pattern": "needle", "path": "link_to_hidden"})
        by_dir_link = await call_error(client, "grep", {"pattern": "needle", "path": "link_to_hidden_dir"})
        out = await call_error(client, "grep", {"pattern": "needle", "path": "link_out"})
    for error in (by_link, by_dir_link, out):
        assert error["code"] == "refused" and "filesystem.paths" in error["rule"], error


async def test_a_hard_link_to_a_hidden_file_is_not_searched_when_the_policy_refuses_them(mcp_client, hostile, outside):
    """Found by testing from outside: with filesystem.hardlinks = 'refuse', read_file refused a hard
    link to a hidden file, but grep showed its lines. Files with several links are not searched
    then, named as skipped, and a search of such a file alone is refused."""
    os.link(hostile / "secret" / "a.txt", hostile / "hl.txt")
    policy = _policy(outside) + 'hardlinks = "refuse"\n'
    async with mcp_client(policy=policy) as client:
        tree = await call_ok(client, "grep", {"pattern": "needle"})
        alone = await call_error(client, "grep", {"pattern": "needle", "path": "hl.txt"})
    assert "hl.txt" not in _paths(tree) and "notes.txt" in _paths(tree), tree
    assert {"path": "hl.txt", "reason": tree["skipped"][0]["reason"]} in tree["skipped"]
    assert "filesystem.hardlinks" in tree["skipped"][0]["reason"] and "secret" not in str(tree)
    assert alone["code"] == "refused" and "filesystem.hardlinks" in alone["message"], alone
    async with mcp_client(policy=_policy(outside)) as client:  # the default reads through them, as read_file does
        assert "hl.txt" in _paths(await call_ok(client, "grep", {"pattern": "needle"}))


def test_swapped_for_a_link_after_the_gateway_is_refused(make_workspace, hostile, outside):
    """The gateway checked ``sub``; then it became a link to the hidden directory. The
    object grep opens is checked again, so rg never starts there."""
    workspace = make_workspace(_policy(outside))
    (hostile / "sub").mkdir()
    args = GrepArgs(pattern="needle", path=str(hostile / "sub"))
    os.rmdir(hostile / "sub")
    os.symlink("secret", hostile / "sub")
    with pytest.raises(Refused) as caught:
        search(args, workspace.paths, workspace.limits)
    assert "secret" in caught.value.message and caught.value.rule.startswith("filesystem.paths")


def test_a_directory_swapped_for_a_link_while_rg_walks_is_not_followed(make_workspace, hostile, outside):
    """rg opens each subdirectory by name after reading its parent's entries, and a command in
    the workspace can swap one for a link in between, in a loop. rg walks a tree in which the
    kernel follows no link (grep_view), so no search reaches the hidden directory the link
    leads to (over MCP, 3 of 463 searches used to find its file)."""
    workspace = make_workspace(_policy(outside))
    sub = hostile / "g" / "sub"
    sub.mkdir(parents=True)
    for i in range(50):
        (sub / f"f{i}.txt").write_text("needle inside\n")
    stop = threading.Event()

    def swap() -> None:
        real = sub.with_name("sub.real")
        while not stop.is_set():
            try:
                os.rename(sub, real)
            except OSError:
                continue
            try:
                os.symlink(outside, sub)
                os.unlink(sub)
            except OSError:
                pass
            os.rename(real, sub)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    leaks, searches, deadline = [], 0, time.monotonic() + 15
    try:
        while searches < 1500 and time.monotonic() < deadline:
            try:
                text = str(search(GrepArgs(pattern="needle", path=str(hostile / "g")), workspace.paths,
                                  workspace.limits))
            except ToolError:
                text = ""  # rg found the directory gone mid-walk: an error, no leak
            if "loot" in text or "needle outside" in text:
                leaks.append(text[:400])
            searches += 1
    finally:
        stop.set()
        swapper.join()
    assert searches >= 100 and leaks == [], leaks[:3]


def test_the_no_link_view_works_for_a_server_that_is_not_root():
    """A server that is not root gives rg the view through a user namespace of its own: rg,
    run as another user with ``--follow``, still finds the tree's file and not the link's."""
    import shutil
    import subprocess
    import tempfile

    from codespace_file_search import grep_view
    from codespace_file_search.grep_argv import rg_binary

    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root to switch users, and a system python3 another user can run")
    base = tempfile.mkdtemp(prefix="codespace-view-")  # under /tmp: pytest's own directories are 0700
    try:
        os.chmod(base, 0o755)
        tree = os.path.join(base, "tree")
        os.makedirs(os.path.join(tree, "sub"))
        os.makedirs(os.path.join(base, "out"))
        with open(os.path.join(tree, "sub", "a.txt"), "w") as f:
            f.write("needle inside\n")
        with open(os.path.join(base, "out", "b.txt"), "w") as f:
            f.write("needle outside\n")
        os.symlink(os.path.join(base, "out"), os.path.join(tree, "link"))
        shutil.copy(grep_view.__file__, base)  # on its own: the checkout may be out of the other user's reach
        script = ("import subprocess, sys\nsys.path.insert(0, sys.argv[1])\nimport grep_view\n"
                  "print(grep_view.available())\n"
                  "done = subprocess.run([sys.argv[2], '--follow', '--no-config', 'needle'], "
                  "preexec_fn=grep_view.enter, capture_output=True, text=True)\n"
                  "print(repr(done.stdout + done.stderr))\n")
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-I", "-c",
                               script, base, rg_binary()], cwd=tree, capture_output=True, text=True, timeout=60,
                              check=False)
    finally:
        shutil.rmtree(base)
    assert done.returncode == 0, done.stderr
    available, output = done.stdout.splitlines()
    assert available == "None", available
    assert "sub/a.txt:needle inside" in output and "needle outside" not in output, output
    assert "Too many levels of symbolic links" in output, output  # even with --follow


async def test_links_in_the_tree_are_not_followed(mcp_client, hostile, outside, monkeypatch, tmp_path):
    # An rg config asking to follow links must not reach the rg grep runs.
    config = tmp_path / "rgrc"
    config.write_text("--follow\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    (hostile / "inside").mkdir()
    (hostile / "inside" / "x.txt").write_text("needle inside\n")
    os.symlink("inside", hostile / "link_in")
    async with mcp_client() as client:  # default policy: only the links decide
        result = await call_ok(client, "grep", {"pattern": "needle", "exclude": ["secret", "odd*"]})
    assert _paths(result) == ["inside/x.txt", "notes.txt"]


async def test_odd_names(mcp_client, ws):
    ws.mkdir(exist_ok=True)
    (ws / "line\nbreak.txt").write_text("needle 1\n")
    (ws / "a:b:c.txt").write_text("needle 2\n")
    (ws / "ünï 😀.txt").write_text("needle 5 ünï\n")
    (ws / "ctl\x01\x7f.txt").write_text("needle 3\n")
    fd = os.open(os.fsencode(str(ws)) + b"/bad\xff\xfename.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"needle 4 \xff invalid utf-8 text\n")
    os.close(fd)
    async with mcp_client() as client:
        result = await call_ok(client, "grep", {"pattern": "needle"})
        paged, cursor = [], None
        while True:
            page = await call_ok(client, "grep", {"pattern": "needle", "max_matches": 2,
                                                  **({"cursor": cursor} if cursor else {})})
            paged += page["matches"]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
    got = {m["path"]: m["line"] for m in result["matches"]}
    assert got == {"a:b:c.txt": "needle 2", "bad\\xff\\xfename.txt": "needle 4 \\xff invalid utf-8 text",
                   "ctl\x01\x7f.txt": "needle 3", "line\nbreak.txt": "needle 1", "ünï 😀.txt": "needle 5 ünï"}
    assert paged == result["matches"]


async def test_a_fifo_in_the_tree_does_not_hang(mcp_client, ws):
    ws.mkdir(exist_ok=True)
    os.mkfifo(ws / "pipe")
    (ws / "z.txt").write_text("needle\n")
    async with mcp_client() as client:
        with anyio.fail_after(20):
            result = await call_ok(client, "grep", {"pattern": "needle"})
            error = await call_error(client, "grep", {"pattern": "needle", "path": "pipe"})
    assert _paths(result) == ["z.txt"]
    assert error["code"] == "not_regular" and "FIFO" in error["message"]


@pytest.mark.parametrize("where", [".gitignore", "src/deep/.gitignore"])
async def test_a_fifo_made_a_gitignore_stops_the_search_at_once_and_says_so(mcp_client, ws, where):
    """Found by testing: rg opens every .gitignore it meets, and opening a FIFO waits for a
    writer; any command can make one. grep with gitignore=true then waited out its whole
    timeout (20 s) and answered "0 matches" as if truncated. Now rg is found waiting on the
    FIFO, stopped, and the answer names it."""
    ws.mkdir(exist_ok=True)
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "src" / "a.txt").write_text("needle\n")
    os.mkfifo(ws / where)
    async with mcp_client() as client:
        start = time.monotonic()
        with anyio.fail_after(15):
            error = await call_error(client, "grep", {"pattern": "needle", "gitignore": True})
        assert time.monotonic() - start < 5, "the search waited on the FIFO"
        assert error["code"] == "not_regular", error
        assert f"{where}, which is a FIFO (named pipe)" in error["message"] and "gitignore=false" in error["message"]
        assert not rg_children()  # the stopped rg is gone
        fine = await call_ok(client, "grep", {"pattern": "needle"})  # without gitignore nothing opens it
        assert _paths(fine) == ["src/a.txt"]
        os.unlink(ws / where)
        assert _paths(await call_ok(client, "grep", {"pattern": "needle", "gitignore": True})) == ["src/a.txt"]


async def test_a_gitignore_of_very_many_patterns_is_stopped_by_rgs_memory_limit(mcp_client, ws):
    """Found by testing: 300,000 patterns in a .gitignore (6.7 MB: any command can write it) took
    rg 110 s and 6.5 GB of memory with gitignore=true, on a host shared with the server. rg's heap
    is limited now: it fails within seconds and the answer says why and what to do instead."""
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("needle\n")
    (ws / ".gitignore").write_text("".join(f"dir{i}/**/*.x{i}\n" for i in range(300_000)))
    async with mcp_client() as client:
        with anyio.fail_after(100):
            error = await call_error(client, "grep", {"pattern": "needle", "gitignore": True, "timeout_ms": 90_000})
        assert error["code"] == "grep_failed", error
        assert "more than the 1024 MiB of memory grep allows it" in error["message"], error
        assert "gitignore=false" in error["message"], error
        assert not rg_children()
        assert _paths(await call_ok(client, "grep", {"pattern": "needle"})) == ["a.txt"]  # without it: as ever


async def test_huge_lines(mcp_client, ws):
    ws.mkdir(exist_ok=True)
    (ws / "a_long.txt").write_text("x" * 200_000 + " needle\n")
    (ws / "b_huge.min.js").write_text("needle" + "y" * (5 * 1024 * 1024) + "\nneedle after\n")
    async with mcp_client() as client:
        result = await call_ok(client, "grep", {"pattern": "needle", "max_line_chars": 100})
    first, second = result["matches"]
    assert first["path"] == "a_long.txt" and first["line_truncated"] and len(first["line"]) == 100
    assert (second["path"], second["line_number"], second["line"]) == ("b_huge.min.js", 2, "needle after")
    assert result["skipped"] == [{"path": "b_huge.min.js",
                                  "reason": "a matching or context line longer than 4 MiB was left out"}]


async def test_patterns_that_look_like_options_or_hold_nul(mcp_client, ws):
    ws.mkdir(exist_ok=True)
    (ws / "f.txt").write_text("run --files here\n-e too\n")
    async with mcp_client() as client:
        option = await call_ok(client, "grep", {"pattern": "--files", "literal": True})
        dash_e = await call_ok(client, "grep", {"pattern": "-e"})
        nul = await client.call_tool("grep", {"pattern": "a\u0000b"})
    assert [m["line_number"] for m in option["matches"]] == [1]
    assert [m["line_number"] for m in dash_e["matches"]] == [2]
    assert nul.is_error and "NUL" in nul.content[0].text and "\\x00" in nul.content[0].text


def test_cancel_and_timeout_kill_rg(make_workspace, ws):
    ws.mkdir(exist_ok=True)
    with open(ws / "big.txt", "w") as f:
        for i in range(300_000):
            f.write(f"needle {i} with some text to search through\n")
    workspace = make_workspace()
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ToolError) as caught:
        search(GrepArgs(pattern="needle", path=str(ws)), workspace.paths, workspace.limits, cancel)
    assert caught.value.code == "cancelled"
    assert rg_children() == []
    timed = search(GrepArgs(pattern="needle", path=str(ws), timeout_ms=1), workspace.paths, workspace.limits)
    assert timed["truncated"] and timed["truncated_reason"].startswith("timeout_ms (1 ms)")
    assert "next_cursor" not in timed or timed["next_cursor"] is None
    assert rg_children() == []
    # Cancelled while rg is blocked on a full pipe, from another thread, as run_cancellable does.
    cancel = threading.Event()
    outcome = {}

    def run():
        try:
            search(GrepArgs(pattern="needle", path=str(ws), max_matches=50_000, max_bytes=4 * 1024 * 1024),
                   workspace.paths, workspace.limits, cancel)
            outcome["done"] = "finished"
        except ToolError as exc:
            outcome["done"] = exc.code

    worker = threading.Thread(target=run)
    worker.start()
    cancel.set()
    worker.join(20)
    assert not worker.is_alive() and outcome["done"] in ("cancelled", "finished")
    assert rg_children() == []


@pytest.mark.in_process
async def test_a_client_that_gives_up_stops_rg(mcp_client, ws):
    """A sparse 4 GiB file keeps rg busy for seconds (--binary reads it all); the client
    cancels the call (notifications/cancelled) and rg must be gone, reaped, at once."""
    ws.mkdir(exist_ok=True)
    with open(ws / "sparse.txt", "wb") as f:
        f.truncate(4 << 30)
    async with mcp_client() as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "grep", {"pattern": "needle", "timeout_ms": 120_000})
            with anyio.fail_after(10):
                while not rg_children():
                    await anyio.sleep(0.01)
            cancelled_at = time.monotonic()
            tg.cancel_scope.cancel()
        while rg_children() and time.monotonic() < cancelled_at + 60:
            await anyio.sleep(0.02)
        # rg alone would take tens of seconds here; stopped, it is gone in well under that
        assert time.monotonic() - cancelled_at < 5, "rg ran on after the call was cancelled"
        with anyio.fail_after(10):
            timed = await call_ok(client, "grep", {"pattern": "needle", "timeout_ms": 300})
    assert timed["truncated"] and timed["truncated_reason"].startswith("timeout_ms (300 ms)")
    assert rg_children() == []


async def test_a_name_with_a_line_break_stays_whole_in_a_skip_reason(mcp_client, ws):
    """Found by testing from outside: rg's message about a file whose name holds a newline spans
    two lines of its stderr, and skipped showed the first half ("rg: ./a") and lost the rest."""
    bad = ws / "a\nb"
    bad.mkdir(parents=True)
    (bad / ".gitignore").write_text("a{\n")
    (bad / "f.txt").write_text("needle\n")
    async with mcp_client() as client:
        result = await call_ok(client, "grep", {"pattern": "needle", "gitignore": True})
    reasons = [s["reason"] for s in result["skipped"]]
    assert len(reasons) == 1 and reasons[0].startswith("rg: ./a\nb/.gitignore: line 1: error parsing glob"), reasons
    assert _paths(result) == ["a\nb/f.txt"]

"""apply_patch through real MCP sessions: both client modes, both patch modes, the
tests' FileSystem backend and (when installed) the real one."""

from __future__ import annotations

import pytest
from conftest import patch_of, write

from codespace.testing import call_error, call_ok, connect
from codespace_patch.conformance.trees import snapshot

pytestmark = pytest.mark.anyio


MULTI_OK = patch_of(
    "*** Add File: new/created.txt", "+hello",
    "*** Delete File: gone.txt",
    "*** Update File: src/app.py", "@@ def main():", "-    return 1", "+    return 2",
    "*** Update File: old.txt", "*** Move to: moved/old.txt", "@@", " keep", "-x", "+y",
)


def _tree(ws):
    write(ws, {"gone.txt": "bye\n", "src/app.py": "def main():\n    return 1\n", "old.txt": "keep\nx\n"})


async def test_atomic_by_default_with_summary_files_and_diffs(make_app, ws, mode):
    _tree(ws)
    async with connect(make_app(), mode=mode) as client:
        result = await call_ok(client, "apply_patch", {"patch": MULTI_OK})
    assert result["applied"] is True and result["replayed"] is False
    assert result["summary"] == (
        "Success. Updated the following files:\nA new/created.txt\nM src/app.py\nM moved/old.txt\nD gone.txt\n"
    )
    assert [(f["action"], f["path"]) for f in result["files"]] == [
        ("add", str(ws / "new/created.txt")), ("delete", str(ws / "gone.txt")),
        ("update", str(ws / "src/app.py")), ("move", str(ws / "moved/old.txt")),
    ]
    diffs = {f["action"]: f["diff"] for f in result["files"]}
    assert diffs["update"] == (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n-    return 1\n+    return 2\n"
    )
    assert diffs["add"] == "--- /dev/null\n+++ b/new/created.txt\n@@ -0,0 +1 @@\n+hello\n"
    assert diffs["delete"] == "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    assert diffs["move"].startswith("--- a/old.txt\n+++ b/moved/old.txt\n")
    assert result["files"][3]["move_from"] == str(ws / "old.txt")
    assert (ws / "new/created.txt").read_text() == "hello\n"
    assert not (ws / "gone.txt").exists() and not (ws / "old.txt").exists()
    assert (ws / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert (ws / "moved/old.txt").read_text() == "keep\ny\n"


async def test_text_result_shows_summary_and_diff(make_app, ws, mode):
    write(ws, {"a.txt": "one\n"})
    async with connect(make_app(), mode=mode) as client:
        result = await client.call_tool("apply_patch", {"patch": patch_of("*** Update File: a.txt", "-one", "+two")})
    text = result.content[0].text
    assert text.startswith("Success. Updated the following files:\nM a.txt\n")
    assert "-one\n+two\n" in text


async def test_dry_run_writes_nothing(make_app, ws, mode):
    _tree(ws)
    before = snapshot(ws)
    async with connect(make_app(), mode=mode) as client:
        for patch_mode in ("atomic", "upstream"):
            result = await client.call_tool("apply_patch", {"patch": MULTI_OK, "dry_run": True, "mode": patch_mode})
            assert not result.is_error
            assert result.structured_content["applied"] is False
            assert result.content[0].text.startswith("[dry run: nothing was written]\nSuccess.")
            assert len(result.structured_content["files"]) == 4
    assert snapshot(ws) == before


FAILING_LAST = patch_of(
    "*** Add File: new/created.txt", "+hello",
    "*** Delete File: gone.txt",
    "*** Update File: src/app.py", "@@ def main():", "-    return 1", "+    return 2",
    "*** Update File: old.txt", "*** Move to: moved/old.txt", "@@", " keep", "-x", "+y",
    "*** Update File: src/app.py", "@@", "-this line is not there", "+z",
)


async def test_atomic_failure_leaves_the_tree_byte_identical(make_app, ws, mode):
    _tree(ws)
    (ws / "src/app.py").chmod(0o755)
    before = snapshot(ws)
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": FAILING_LAST})
    assert error["message"].startswith(f"Failed to find expected lines in {ws}/src/app.py:\nthis line is not there")
    assert error["code"] == "patch_lines_not_found"
    assert error["details"]["changed"] is False
    assert snapshot(ws) == before


async def test_upstream_mode_keeps_sections_before_the_failure(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"mode": "upstream", "patch": patch_of(
            "*** Add File: created.txt", "+hello", "*** Update File: missing.txt", "@@", "-old", "+new")})
    assert error["message"].startswith(
        f"Failed to read file to update {ws}/missing.txt: No such file or directory (os error 2)"
    )
    assert "keeps the sections applied before the failure: A created.txt" in error["message"]
    assert error["details"]["applied_before_failure"] == ["A created.txt"]
    assert (ws / "created.txt").read_text() == "hello\n"


async def test_failure_names_chunk_context_and_closest_lines(make_app, ws, mode):
    body = "".join(f"# line {i}\n" for i in range(30)) + "def total(items):\n    s = 0\n    for i in items:\n        s += i\n"
    write(ws, {"calc.py": body})
    patch = patch_of(
        "*** Update File: calc.py", "@@", "-# line 3", "+# line three",
        "@@ def total(items):", "     s = 0", "     for item in items:", "-        s += item", "+        s += item * 2",
    )
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": patch})
    details = error["details"]
    assert error["message"].startswith(f"Failed to find expected lines in {ws}/calc.py:\n    s = 0\n    for item in items:")
    assert details["upstream_message"] == (
        f"Failed to find expected lines in {ws}/calc.py:\n    s = 0\n    for item in items:\n        s += item"
    )
    assert details["chunk"] == 2 and details["chunks"] == 2 and details["patch_line"] == 6
    assert details["expected"] == ["    s = 0", "    for item in items:", "        s += item"]
    assert details["closest"]["start_line"] == 32
    assert details["closest"]["lines"][0] == "    s = 0"
    assert "chunk 2 of 2 ('@@ def total(items):'" in error["message"]
    assert "    32 |     s = 0" in error["message"]
    assert (ws / "calc.py").read_text() == body


async def test_missing_context_header(make_app, ws, mode):
    write(ws, {"m.py": "class A:\n    def run(self):\n        pass\n"})
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": patch_of(
            "*** Update File: m.py", "@@ def runn(self):", "-        pass", "+        return 1")})
    assert error["message"].startswith(f"Failed to find context 'def runn(self):' in {ws}/m.py")
    assert error["details"]["closest"] == {"start_line": 2, "lines": ["    def run(self):"]}


async def test_parse_errors_keep_upstreams_text_and_free_the_operation_id(make_app, ws, mode):
    write(ws, {"f": "a\n"})
    stacked = patch_of("*** Update File: f", "@@ class A", "@@ def m", "-a", "+b")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": stacked, "operation_id": "p-1"})
        assert error["message"].startswith(
            "Invalid patch hunk on line 4: Unexpected line found in update hunk: '@@ def m'. Every line should start "
            "with ' ' (context line), '+' (added line), or '-' (removed line)"
        )
        assert "stacked" in error["message"] and error["code"] == "patch_invalid"
        fixed = patch_of("*** Update File: f", "@@", "-a", "+b")
        result = await call_ok(client, "apply_patch", {"patch": fixed, "operation_id": "p-1"})
        assert result["operation_id"] == "p-1"
    assert (ws / "f").read_text() == "b\n"


async def test_no_sections(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": "*** Begin Patch\n*** End Patch"})
    assert error["message"].startswith("No files were modified.")


async def test_same_operation_id_replays_instead_of_applying_twice(make_app, ws, mode):
    write(ws, {"n.txt": "1\n"})
    patch = patch_of("*** Update File: n.txt", "@@", "-1", "+1", "+2")
    async with connect(make_app(), mode=mode) as client:
        first = await call_ok(client, "apply_patch", {"patch": patch, "operation_id": "once"})
        again = await call_ok(client, "apply_patch", {"patch": patch, "operation_id": "once"})
    assert first["replayed"] is False and again["replayed"] is True
    assert again["summary"] == first["summary"]
    assert (ws / "n.txt").read_text() == "1\n2\n"


async def test_line_endings_and_modes_are_preserved(make_app, ws, mode):
    write(ws, {"w.txt": b"a\r\nb\r\nc", "mac.txt": b"x\ry\r", "run.sh": "#!/bin/sh\necho 1\n"})
    (ws / "run.sh").chmod(0o755)
    async with connect(make_app(), mode=mode) as client:
        await call_ok(client, "apply_patch", {"patch": patch_of(
            "*** Update File: w.txt", " a", "-b", "+B", "+B2",
            "*** Update File: mac.txt", "-y", "+Y",
            "*** Update File: run.sh", "-echo 1", "+echo 2")})
    assert (ws / "w.txt").read_bytes() == b"a\r\nB\r\nB2\r\nc\r\n"
    assert (ws / "mac.txt").read_bytes() == b"x\rY\r"
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o755


async def test_move_onto_itself_deletes_in_both_modes_as_upstream_does(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        for patch_mode in ("upstream", "atomic"):
            write(ws, {"a.txt": "a\n"})
            result = await call_ok(client, "apply_patch", {"mode": patch_mode, "patch": patch_of(
                "*** Update File: a.txt", "*** Move to: a.txt", "-a", "+b")})
            assert result["summary"] == "Success. Updated the following files:\nM a.txt\n"
            assert not (ws / "a.txt").exists()


async def test_large_diffs_are_capped(make_app, ws, mode):
    big = patch_of("*** Add File: big.txt", *[f"+line {i:06d}" for i in range(40000)])
    async with connect(make_app(), mode=mode) as client:
        result = await call_ok(client, "apply_patch", {"patch": big})
    diff = result["files"][0]["diff"]
    assert len(diff) < 270 * 1024 and diff.endswith("read the file for the rest\n")
    assert (ws / "big.txt").read_text().count("\n") == 40000


async def test_deleting_a_link_is_upstream_mode_only(make_app, ws, mode):
    import os

    write(ws, {"target.txt": "t\n"})
    os.symlink("target.txt", ws / "link")
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": patch_of("*** Delete File: link")})
        assert error["message"].startswith(f"Failed to delete file {ws}/link")
        assert "atomic mode does not remove symbolic links" in error["message"]
        assert (ws / "link").is_symlink()
        await call_ok(client, "apply_patch", {"mode": "upstream", "patch": patch_of("*** Delete File: link")})
    assert not (ws / "link").is_symlink() and (ws / "target.txt").read_text() == "t\n"


@pytest.mark.parametrize("patch_mode", ["atomic", "upstream"])
async def test_a_big_file_many_chunks_through_both_rewrite_paths(make_app, ws, mode, patch_mode):
    """A 0.7 MB file (read and written inline when cached, rewritten on the text path)
    and its CRLF twin (the line path), 50 chunks each; then the same patch again, which
    must fail as a whole and leave both files as the first call left them."""
    lines = [f"line {i}: some representative text of a source file" for i in range(14000)]
    lf = "".join(f"{line}\n" for line in lines)
    write(ws, {"big.txt": lf, "big-crlf.txt": lf.replace("\n", "\r\n")})
    body = []
    for name in ("big.txt", "big-crlf.txt"):
        body.append(f"*** Update File: {name}")
        for i in range(100, 14000, 280):
            body += [f"@@ line {i - 1}: some representative text of a source file",
                     f"-line {i}: some representative text of a source file", f"+line {i}: CHANGED"]
    patch = patch_of(*body)
    want = "".join(f"line {i}: CHANGED\n" if i in range(100, 14000, 280) else f"{line}\n" for i, line in enumerate(lines))
    async with connect(make_app(), mode=mode) as client:
        result = await call_ok(client, "apply_patch", {"patch": patch, "mode": patch_mode})
        assert (ws / "big.txt").read_text() == want
        assert (ws / "big-crlf.txt").read_bytes() == want.replace("\n", "\r\n").encode()
        diffs = {f["path"]: f["diff"] for f in result["files"]}
        assert diffs[str(ws / "big.txt")].count("\n@@ ") == 50 and diffs[str(ws / "big-crlf.txt")].count("\n@@ ") == 50
        assert "-line 100: some representative text of a source file\n+line 100: CHANGED\n" in diffs[str(ws / "big.txt")]
        before = snapshot(ws)
        await call_error(client, "apply_patch", {"patch": patch, "mode": "atomic"})
    assert snapshot(ws) == before

"""The unified diffs apply_patch returns are real diffs: GNU patch turns the old
file into the new one with them."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from codespace_patch import ApplyError, parse_patch, rewrite
from codespace_patch.diff import unified, whole_file
from codespace_patch.conformance.fuzz import _chunks, _file_lines

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")


def _roundtrip(tmp_path, old: str, new: str, diff: str) -> None:
    (tmp_path / "f").write_text(old)
    done = subprocess.run(["patch", "-s", "-f", "--no-backup-if-mismatch", "-p1", "-d", str(tmp_path)],
                          input=diff, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (done.stdout, done.stderr, diff)
    assert (tmp_path / "f").read_text() == new


@pytest.mark.parametrize("seed", range(80))
def test_update_diffs_apply_with_gnu_patch(tmp_path, seed):
    rng = random.Random(seed)
    lines = [line.replace("\r", "").replace("\x0b", "").replace("\x0c", "") for line in _file_lines(rng)]
    old = "".join(line + "\n" for line in lines)
    if lines and rng.random() < 0.3:
        old = old[:-1]  # no final newline
    body = _chunks(rng, lines, [])
    (section,) = parse_patch("\n".join(["*** Begin Patch", "*** Update File: f", *body, "*** End Patch"])).sections
    try:
        result = rewrite(old, section.chunks, "/w/f")
    except ApplyError:
        return  # this generated patch does not apply; nothing to diff
    diff = unified(result.old, result.new, result.kept, "a/f", "b/f")
    if result.text() == old:
        assert diff == ""
        return
    _roundtrip(tmp_path, old, result.text(), diff)


def test_whole_file_diffs():
    assert whole_file(None, "a\nb\n", "a/x", "b/x") == "--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n+b\n"
    assert whole_file("a", None, "a/x", "b/x") == "--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n\\ No newline at end of file\n"
    assert whole_file(None, "", "a/x", "b/x") == ""


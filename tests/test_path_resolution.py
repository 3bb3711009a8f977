"""The path rules resolve a call's paths with a memo of parent directories
(``PathRules.check(..., resolved=...)``): every resolution must be ``os.path.realpath``'s,
links of every kind included, and a refusal must be the same with and without the memo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codespace.contract import gate
from codespace.policy.paths import _realpath_through
from codespace.workspace import Workspace


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "dir" / "sub").mkdir(parents=True)
    (root / "dir" / "file.txt").write_text("x")
    (root / "other").mkdir()
    os.symlink("file.txt", root / "dir" / "to_file")
    os.symlink("../other", root / "dir" / "to_other")
    os.symlink("missing", root / "dir" / "dangling")
    os.symlink("loop_b", root / "dir" / "loop_a")
    os.symlink("loop_a", root / "dir" / "loop_b")
    os.symlink(str(tmp_path), root / "dir" / "to_outside")
    os.symlink("to_file", root / "dir" / "to_link")
    os.symlink("dir", root / "linked_dir")
    (root / "dir" / "plain").touch()
    return root


NAMES = ["file.txt", "to_file", "to_other", "dangling", "loop_a", "to_outside", "to_link", "sub", "absent",
         "plain", "to_other/deeper", "sub/..", "sub/.", "."]


def test_memoised_resolution_is_realpaths(tree):
    resolved: dict[str, str] = {}
    for base in ("dir", "linked_dir", "absent_dir", "dir/file.txt"):
        for name in NAMES:
            path = str(tree / base) + "/" + name
            assert _realpath_through(path, resolved) == os.path.realpath(path), path
            assert _realpath_through(path, None) == os.path.realpath(path), path
    assert _realpath_through("/", resolved) == "/"


def test_refusals_are_the_same_with_and_without_the_memo(tree, tmp_path):
    workspace = Workspace.open(tree, state_dir=tmp_path / "state")
    paths = [gate.normalize(f"{base}/{name}", str(tree)) for base in ("dir", "linked_dir") for name in NAMES]
    for path in paths:
        for follow in (True, False, None):
            for need in ("read", "write"):
                kept = workspace.paths.check(path, need, follow_leaf=follow, resolved={})
                fresh = workspace.paths.check(path, need, follow_leaf=follow)
                assert (kept and kept.message) == (fresh and fresh.message), (path, need, follow)
    # A loop is refused first now (core 0.2.4: the gateway judges the way of what the kernel cannot
    # resolve, and 40 links is as far as it goes); the link out is refused next.
    refusal = gate.paths_refusal(workspace.paths, write_through=paths)
    assert refusal is not None and "loop_a takes more than 40 symbolic links" in refusal.message, refusal
    refusal = gate.paths_refusal(workspace.paths, write_through=[p for p in paths if "loop_a" not in p])
    assert refusal is not None and "to_outside" in refusal.message and "symbolic link" in refusal.message


def test_the_kernels_answer_is_realpaths_even_for_proc_and_odd_objects(tree, tmp_path):
    """``realpath`` asks the kernel (an O_PATH open and its /proc/self/fd link) and must give
    ``os.path.realpath``'s answer everywhere the policy could ask: the tree's links, loops and
    missing parts, /proc's magic links (to a directory, to a pipe, the process root), a FIFO,
    a device, a directory with a trailing slash, and a file with one."""
    from codespace.policy.paths import realpath

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    read_end, write_end = os.pipe()
    directory = os.open(tree / "dir", os.O_RDONLY | os.O_DIRECTORY)
    try:
        paths = [str(tree / base) + "/" + name for base in ("dir", "linked_dir", "absent_dir") for name in NAMES]
        paths += [str(fifo), "/dev/null", str(tree / "dir") + "/", str(tree / "dir" / "file.txt") + "/",
                  "/proc/self/root", "/proc/self/cwd", f"/proc/self/fd/{directory}", f"/proc/self/fd/{directory}/sub",
                  f"/proc/self/fd/{read_end}", "/proc/self", "/", "relative/never"]
        for path in paths:
            assert realpath(path) == os.path.realpath(path), path
    finally:
        for fd in (read_end, write_end, directory):
            os.close(fd)

"""The kept walk stays correct as the tree changes: real files, real inotify events."""

from __future__ import annotations

import os
import shutil

from codespace_file_search.walk import Bounds
from codespace_file_search.walk_index import WalkIndex


def _paths(index: WalkIndex, root: str, **bounds) -> tuple[set[str], bool]:
    walked, kept = index.walk(root, None, Bounds(**bounds) if bounds else None)
    return {p for p, _, _ in walked.entries}, kept


def _tree(tmp_path) -> str:
    root = tmp_path / "root"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "main.py").write_text("x")
    (root / "README").write_text("x")
    return os.path.realpath(root)


def test_a_repeated_walk_comes_from_memory_until_something_changes(tmp_path):
    root = _tree(tmp_path)
    index = WalkIndex()
    first, kept = _paths(index, root)
    assert not kept and "src/main.py" in first
    again, kept = _paths(index, root)
    assert kept and again == first
    with open(os.path.join(root, "src", "deep", "new.rs"), "w"):
        pass
    after, kept = _paths(index, root)
    assert not kept and "src/deep/new.rs" in after
    assert _paths(index, root) == (after, True)
    index.clear()


def test_removals_renames_and_permissions_are_heard(tmp_path):
    root = _tree(tmp_path)
    index = WalkIndex()
    _paths(index, root)
    os.rename(os.path.join(root, "src"), os.path.join(root, "lib"))
    paths, kept = _paths(index, root)
    assert not kept and "lib/main.py" in paths and "src/main.py" not in paths
    shutil.rmtree(os.path.join(root, "lib", "deep"))
    paths, kept = _paths(index, root)
    assert not kept and "lib/deep" not in paths
    os.chmod(os.path.join(root, "lib"), 0o755)
    assert _paths(index, root)[1] is False  # an attribute change of a directory: walked again
    index.clear()


def test_ignore_file_edits_and_a_git_directory_above_the_root_are_heard(tmp_path):
    root = _tree(tmp_path)
    index = WalkIndex()
    (tmp_path / ".gitignore").write_text("")  # outside the root: not read, only the .git matters
    with open(os.path.join(root, ".gitignore"), "w") as f:
        f.write("README\n")
    paths, _ = _paths(index, root)
    assert "README" in paths  # no repository yet: .gitignore does not apply
    os.mkdir(tmp_path / ".git")
    paths, kept = _paths(index, root)
    assert not kept and "README" not in paths
    with open(os.path.join(root, ".gitignore"), "w") as f:
        f.write("*.py\n")
    paths, kept = _paths(index, root)
    assert not kept and "README" in paths and "src/main.py" not in paths
    index.clear()


def test_a_link_target_changing_outside_the_root_is_heard(tmp_path):
    root = _tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), os.path.join(root, "out"))
    os.symlink(str(tmp_path / "later"), os.path.join(root, "dangling"))
    index = WalkIndex()
    paths, _ = _paths(index, root)
    assert "out" in paths and "dangling" not in paths
    (tmp_path / "later").write_text("x")
    paths, kept = _paths(index, root)
    assert not kept and "dangling" in paths
    shutil.rmtree(outside)
    paths, kept = _paths(index, root)
    assert not kept and "out" not in paths
    index.clear()


def test_a_truncated_walk_is_never_kept(tmp_path):
    root = _tree(tmp_path)
    index = WalkIndex()
    assert _paths(index, root, entries=2)[1] is False
    assert _paths(index, root, entries=2)[1] is False
    index.clear()

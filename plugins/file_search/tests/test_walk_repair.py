"""A kept walk mended where the tree changed equals a fresh walk: real trees, real inotify
events, every kind of change the walk reads (entries, directories, ignore files, a new
repository, links, special files), one at a time and many between two searches."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from codespace_file_search.walk import walk
from codespace_file_search.walk_index import WalkIndex


def _tree(base) -> str:  # noqa: ANN001
    root = base / "root"
    for d in ("src/core/deep", "src/util", "docs", "build/out", ".hidden/x", "repo/inner"):
        (root / d).mkdir(parents=True)
    for f in ("src/main.py", "src/core/a.rs", "src/core/deep/b.rs", "src/util/u.py", "docs/readme.md",
              "build/out/o.bin", ".hidden/x/h.txt", "repo/inner/i.py", "repo/skip.log", "top.txt"):
        (root / f).write_text("x")
    (root / "repo" / ".git").mkdir()
    (root / "repo" / ".gitignore").write_text("*.log\n")
    (root / ".ignore").write_text("build/\n")
    os.symlink("src/main.py", root / "link_file")
    os.symlink(str(base), root / "link_out")
    os.mkfifo(root / "docs" / "pipe")
    (base / "elsewhere" / "moved").mkdir(parents=True)
    (base / "elsewhere" / "moved" / "m.py").write_text("x")
    return os.path.realpath(root)


def _check(index: WalkIndex, root: str, changed: bool = True) -> bool:
    got, from_memory = index.walk(root)
    fresh = walk(root)
    assert len(got.entries) == len(set(got.entries)), "an entry listed twice"
    assert set(got.entries) == set(fresh.entries)
    assert from_memory is not changed
    again, from_memory = index.walk(root)
    assert from_memory and again is got  # the mended walk is kept
    return got.mended


CHANGES = {
    "file created deep": lambda r, b: open(os.path.join(r, "src/core/deep/new.rs"), "w").close(),
    "file removed": lambda r, b: os.unlink(os.path.join(r, "src/util/u.py")),
    "directory made with files": lambda r, b: (os.makedirs(os.path.join(r, "src/fresh/sub")),
                                               open(os.path.join(r, "src/fresh/sub/f.py"), "w").close()),
    "directory tree removed": lambda r, b: shutil.rmtree(os.path.join(r, "src/core")),
    "directory renamed inside": lambda r, b: os.rename(os.path.join(r, "src/util"), os.path.join(r, "docs/util2")),
    "directory moved out": lambda r, b: os.rename(os.path.join(r, "docs"), os.path.join(b, "docs_out")),
    "directory moved in": lambda r, b: os.rename(os.path.join(b, "elsewhere/moved"), os.path.join(r, "src/moved")),
    "gitignore written": lambda r, b: open(os.path.join(r, "repo/.gitignore"), "a").write("inner/\n"),
    "ignore file removed": lambda r, b: os.unlink(os.path.join(r, ".ignore")),
    "ignore file made below": lambda r, b: open(os.path.join(r, "src/.ignore"), "w").write("*.py\n"),
    "repository made": lambda r, b: (os.mkdir(os.path.join(r, "src/.git")),
                                     open(os.path.join(r, "src/.gitignore"), "w").write("core/\n")),
    "directory replaced by a file": lambda r, b: (shutil.rmtree(os.path.join(r, "src/util")),
                                                  open(os.path.join(r, "src/util"), "w").close()),
    "directory replaced by a link": lambda r, b: (shutil.rmtree(os.path.join(r, "src/util")),
                                                  os.symlink("core", os.path.join(r, "src/util"))),
    "directory replaced by another": lambda r, b: (shutil.rmtree(os.path.join(r, "src/util")),
                                                   os.makedirs(os.path.join(r, "src/util/other"))),
    "link to a directory inside": lambda r, b: os.symlink("../src/core", os.path.join(r, "docs/core_link")),
    "link removed": lambda r, b: os.unlink(os.path.join(r, "link_out")),
    "link at the root to a directory inside": lambda r, b: os.symlink("src", os.path.join(r, "src_link")),
    "file created at the root": lambda r, b: open(os.path.join(r, "new_top.txt"), "w").close(),
    "fifo made": lambda r, b: os.mkfifo(os.path.join(r, "src/util/p2")),
    "hidden directory emptied": lambda r, b: shutil.rmtree(os.path.join(r, ".hidden/x")),
    "mode of a directory": lambda r, b: os.chmod(os.path.join(r, "src/core"), 0o700),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_one_change_mended_equals_a_fresh_walk(tmp_path, change):
    root = _tree(tmp_path)
    index = WalkIndex()
    index.walk(root)
    CHANGES[change](root, str(tmp_path))
    _check(index, root)
    index.clear()


def test_a_plain_change_is_mended_not_walked_again(tmp_path):
    root = _tree(tmp_path)
    index = WalkIndex()
    index.walk(root)
    CHANGES["file created deep"](root, str(tmp_path))
    assert _check(index, root)
    CHANGES["directory made with files"](root, str(tmp_path))
    assert _check(index, root)
    index.clear()


@pytest.mark.parametrize("seed", range(20))
def test_many_changes_between_two_searches(tmp_path, seed):
    rng = random.Random(seed)
    root = _tree(tmp_path)
    index = WalkIndex()
    index.walk(root)
    for _ in range(4):
        changed = False
        for name in rng.sample(sorted(CHANGES), 3):
            try:
                CHANGES[name](root, str(tmp_path))
                changed = True
            except OSError:
                pass  # an earlier change took what this one acts on
        _check(index, root, changed)
    index.clear()

"""The walk under a strict policy while a parent directory of a followed path is swapped
for a link out of the workspace and back, in a loop: no name from outside may appear.

The walk reaches a link's target and the search root by a resolved path; opening that path
resolves its parents again, so a parent swapped for a link between the check and the open
would lead outside. The swapping runs in its own process, so that it races the walk truly in
parallel (a thread would mostly wait for the walk to let go of the interpreter)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from codespace_file_search.walk import Bounds, walk

STRICT = '''version = 1
[filesystem.paths]
"/" = "none"
'''
MARKER = "OUTSIDE_NAME_MARKER"
ROUNDS = 6000  # the unguarded walk leaked dozens to hundreds of times in each run tried, in about 1 s

# Swaps `a` for a link to the outside directory and back until stdin closes; prints once started.
SWAPPER = r"""
import os, select, sys
directory, target = sys.argv[1], sys.argv[2]
aside = directory + ".real"
print("swapping", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    os.rename(directory, aside)
    os.symlink(target, directory)
    os.unlink(directory)
    os.rename(aside, directory)
"""


def _tree(ws: Path, outside: Path) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "inside_marker").write_text("x")
    (ws / "L").symlink_to("a/b")
    (outside / "b").mkdir(parents=True)
    (outside / "b" / MARKER).write_text("x")


def _names(root: str, rules) -> set[str]:  # noqa: ANN001 - codespace PathRules
    try:
        walked = walk(root, rules, Bounds(seconds=5))
    except FileNotFoundError:
        return set()  # the root was not where it was resolved: refused, nothing listed
    return {name for _, name, _ in walked.entries}


def test_no_name_from_outside_while_a_parent_is_swapped_for_a_link(ws, tmp_path, make_workspace):
    outside = tmp_path / "outside"
    _tree(ws, outside)
    rules = make_workspace(policy=STRICT).paths
    assert rules.check_exact(str(outside / "b"), "read") is not None  # the policy does hide it
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws / "a"), str(outside)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    leaks: dict[str, int] = {"through the link L": 0, "as the search root a/b": 0}
    seen_inside = 0
    try:
        assert swapper.stdout.readline() == "swapping\n"
        deadline = time.monotonic() + 15
        for _ in range(ROUNDS):
            found = _names(str(ws), rules)  # enters L -> a/b by its resolved path
            leaks["through the link L"] += MARKER in found
            seen_inside += "inside_marker" in found
            # find_files resolves its `path` argument, then the walk opens that path
            leaks["as the search root a/b"] += MARKER in _names(str(ws / "a" / "b"), rules)
            if time.monotonic() > deadline:
                break
    finally:
        swapper.stdin.close()
        swapper.wait(timeout=10)
    assert swapper.returncode == 0
    assert leaks == {"through the link L": 0, "as the search root a/b": 0}
    assert seen_inside > 0  # the link was entered: the race was run, not avoided

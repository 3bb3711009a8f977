"""Protected names below the top of a writable root (issue: a sandboxed command created
sub/.git/config with an fsmonitor entry while write_file refused it). Existing ones are
read-only at any depth in both engines; the cost of finding them is bounded."""

from __future__ import annotations

import os
import time

from codespace_linux_sandbox import protected_scan
from codespace_linux_sandbox.protected_scan import SYNC_BUDGET_S, ProtectedScan, walk

ATTACKS = (
    "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> sub/.git/config",
    "mkdir -p sub/.git/hooks && echo evil > sub/.git/hooks/pre-commit",
    "rm -f sub/.git/config",
    "mv sub/.git sub/moved-git",
    "echo x > a/b/c/.codex/config.toml",
    "rm -rf a/b/c/.codex",
    "mv a/b/c/.agents a/b/c/agents-gone",
    "touch a/b/c/.codespace/policy.toml",
)


def _tree(ws):
    (ws / "sub" / ".git").mkdir(parents=True)
    (ws / "sub" / ".git" / "config").write_text("[core]\n")
    deep = ws / "a" / "b" / "c"
    for name in (".codex", ".agents", ".codespace"):
        (deep / name).mkdir(parents=True)
    (deep / ".codex" / "config.toml").write_text("model = 'x'\n")
    return deep


def test_existing_protected_names_below_the_root_are_read_only(sandbox_env):
    ws = sandbox_env.ws
    deep = _tree(ws)
    (ws / "work").mkdir()
    before = {p: p.read_bytes() for p in (ws / "sub" / ".git" / "config", deep / ".codex" / "config.toml")}
    for attack in ATTACKS:
        code, _out, _err = sandbox_env.run(["/bin/sh", "-c", attack])
        assert code != 0, attack
    for path, data in before.items():
        assert path.read_bytes() == data
    assert sorted(os.listdir(ws / "sub" / ".git")) == ["config"]
    assert sorted(os.listdir(deep)) == [".agents", ".codespace", ".codex"]
    assert os.listdir(deep / ".codespace") == []
    # ordinary work around them still works (Landlock: in a directory not on the way to one)
    code, _out, err = sandbox_env.run(["/bin/sh", "-c", "mkdir -p work/x && echo ok > work/x/f && cat sub/.git/config"])
    assert code == 0, err
    assert (ws / "work" / "x" / "f").read_text() == "ok\n"


def test_a_protected_name_created_later_is_protected_for_the_next_command(sandbox_env):
    ws = sandbox_env.ws
    (ws / "later").mkdir()
    assert sandbox_env.run(["/bin/true"])[0] == 0  # walked once without it
    (ws / "later" / ".git").mkdir()  # the user clones a repository meanwhile
    (ws / "later" / ".git" / "config").write_text("[core]\n")
    code, _out, _err = sandbox_env.run(["/bin/sh", "-c", "echo evil >> later/.git/config"])
    assert code != 0
    assert (ws / "later" / ".git" / "config").read_text() == "[core]\n"


def test_the_walk_prunes_and_follows_no_links(tmp_path):
    root = tmp_path / "ws"
    (root / "x" / ".git" / "deeper" / ".git").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "hidden" / "y" / ".git").mkdir(parents=True)
    (tmp_path / "elsewhere" / ".git").mkdir(parents=True)
    (root / "link").symlink_to(tmp_path / "elsewhere")
    found, _took, cut = walk(str(root), frozenset({".git"}), frozenset({str(root / "hidden")}))
    assert found == [str(root / "x" / ".git")] and not cut


def _big_tree(root):
    for a in range(20):
        for b in range(50):
            for c in range(20):
                os.makedirs(root / f"a{a}" / f"b{b}" / f"c{c}")
    (root / "a3" / "b7" / ".git").mkdir()


def test_the_cost_of_a_large_tree_is_bounded(tmp_path):
    """20,000 directories: the first command walks them once; later ones never wait for a walk
    longer than the budget (they get the last result while a new walk runs in the background)."""
    root = tmp_path / "big"
    _big_tree(root)
    scan = ProtectedScan()
    started = time.monotonic()
    assert scan.below([str(root)], [".git"], []) == [str(root / "a3" / "b7" / ".git")]
    first = time.monotonic() - started
    took = []
    for _ in range(5):
        started = time.monotonic()
        assert scan.below([str(root)], [".git"], []) == [str(root / "a3" / "b7" / ".git")]
        took.append(time.monotonic() - started)
    assert first > SYNC_BUDGET_S  # the tree is big enough to matter
    assert max(took) < SYNC_BUDGET_S, (first, took)


def test_a_first_walk_goes_on_in_the_background_past_its_limit(tmp_path, monkeypatch):
    """The first command on a tree too big for FIRST_WALK_S waits that long at most; the walk
    finishes in the background, and cannot_enforce names the root until it has."""
    root = tmp_path / "big"
    _big_tree(root)
    monkeypatch.setattr(protected_scan, "FIRST_WALK_S", 0.005)
    scan = ProtectedScan()
    started = time.monotonic()
    scan.below([str(root)], [".git"], [])
    assert time.monotonic() - started < 0.2
    assert scan.truncated() == [str(root)]
    deadline = time.monotonic() + 30
    while scan.truncated() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scan.truncated() == []
    assert scan.below([str(root)], [".git"], []) == [str(root / "a3" / "b7" / ".git")]

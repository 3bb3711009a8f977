"""The fs pin check against the real pinned binary's exec-server, its comparison and its command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract import FsError, PinCheck, PinCheckRequest, UpstreamRpc, codex_binary
from codespace_fs.pin_cases import Op, generate_tree, operations
from codespace_fs.pin_compare import LISTED, PIN_CHECK, _listed, check_tree
from codespace_fs.pin_sides import our_error_class, upstream_error_class, upstream_fact
from codespace_fs.plugin import codespace_pin_checks

PLUGIN_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_binary("0.171.0", log=lambda line: print(line, file=sys.stderr))


def test_the_hook_offers_the_check():
    checks = codespace_pin_checks()
    assert checks == [PIN_CHECK] and isinstance(checks[0], PinCheck)
    assert (PIN_CHECK.plugin, PIN_CHECK.component) == ("codespace-fs", "codex-file-system")


def test_listed_reasons_are_the_readmes_deliberate_differences():
    section = (PLUGIN_DIR / "README.md").read_text().split("## Pin check", 1)[1].split("### Deliberate differences", 1)[1]
    assert sorted(re.findall(r"^- (.+)$", section, re.M)) == sorted(LISTED.values())


def test_one_tree_agrees_with_the_pinned_binary_and_shows_each_listed_difference(codex, tmp_path):
    with UpstreamRpc.exec_server(codex) as rpc:
        count, found = check_tree(rpc, 171, 10, tmp_path)
    assert count == len(operations(generate_tree(171, ceiling_bytes=64 << 20), 171, 10))
    assert [d for d in found if d.listed is None] == []
    assert {d.listed for d in found} == set(LISTED.values())


def test_upstream_facts_of_the_error_cases(codex, tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    with UpstreamRpc.exec_server(codex) as rpc:
        assert upstream_fact(rpc, tmp_path, Op("read", "f")) == ("ok", b"x")
        assert upstream_fact(rpc, tmp_path, Op("read", "missing")) == ("error", "missing")
        assert upstream_fact(rpc, tmp_path, Op("read", "d")) == ("error", "not_a_file")
        assert upstream_fact(rpc, tmp_path, Op("read", "f/below")) == ("error", "not_a_directory")
        assert upstream_fact(rpc, tmp_path, Op("mkdir", "d")) == ("error", "exists")


def test_error_classes_name_unknown_failures_instead_of_hiding_them():
    assert upstream_error_class("Permission denied (os error 13)") == "other: Permission denied (os error 13)"
    assert our_error_class(FsError("gone", errno=2)) == "missing"
    assert our_error_class(FsError("odd", code="weird")).startswith("other: weird")


def test_only_the_exact_listed_shapes_are_listed():
    tree = generate_tree(5, ceiling_bytes=1 << 20)
    # Our refusal of a link is listed; the same refusal of a plain file is not.
    assert _listed(Op("read", "link-to-file"), tree, ("error", "symlink_refused"), ("ok", b"a")) == LISTED["no_follow"]
    plain = sorted(tree.files)[0]
    assert _listed(Op("read", plain), tree, ("error", "symlink_refused"), ("ok", b"a")) is None
    # A listing differing in a plain file's kind, or missing a non-link entry, is not.
    assert _listed(Op("list", ""), tree, ("ok", [("a", "dir")]), ("ok", [("a", "file")])) is None
    assert _listed(Op("list", ""), tree, ("ok", [("a", "file"), ("b", "file")]), ("ok", [("a", "file")])) is None
    assert _listed(Op("list", ""), tree, ("ok", [("a", "file"), ("b", "link")]), ("ok", [("a", "file")])) \
        == LISTED["list_links"]
    # Over our ceiling is listed only when upstream read it.
    assert _listed(Op("read", "over-our-ceiling"), tree, ("error", "too_large"), ("error", "too_large")) is None


def test_generated_operations_are_fixed_by_the_seed():
    tree = generate_tree(9, ceiling_bytes=1 << 20)
    assert operations(tree, 9, 20) == operations(generate_tree(9, ceiling_bytes=1 << 20), 9, 20)
    assert generate_tree(10, ceiling_bytes=1 << 20).files != tree.files


def test_command_line_ci_run_agrees(codex):
    done = subprocess.run([sys.executable, str(PLUGIN_DIR / "pin_check.py"), "--ci", "--no-fetch", "--cases", "5"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.startswith("codespace-fs codex-file-system rust-v0.171.0: agrees")


def test_command_line_refuses_a_bad_release():
    done = subprocess.run([sys.executable, str(PLUGIN_DIR / "pin_check.py"), "--release", "v0.171.0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--release must be an upstream tag" in done.stderr

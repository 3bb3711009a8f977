"""The pin check against the real codex binaries: it agrees with the pinned release, sees what
0.169.0 changed, fails when a side cannot run, and each comparison reports what differs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from codespace_linux_sandbox import pin_argv, pin_check, pin_listed, pin_sides, pin_trace, plugin

from codespace.contract import OracleUnavailable, PinCheckRequest, PinReport, codex_binary
from codespace.sandboxing import layout_for
from codespace.testing import open_workspace

CLI = Path(__file__).parent.parent / "pin_check.py"


def _binary(version: str) -> Path:
    try:
        return codex_binary(version, fetch=False)
    except OracleUnavailable as exc:
        pytest.skip(f"codex {version} is not cached: {exc}")


def _run(version: str, codex: Path | None = None) -> PinReport:
    return pin_check.run(PinCheckRequest(release=f"rust-v{version}", codex=codex or _binary(version), ci=True,
                                         log=lambda _m: None))


@pytest.fixture(scope="module")
def pinned() -> PinReport:
    return _run("0.171.0")


def test_agrees_with_the_pinned_release(pinned):
    assert pinned.unavailable is None and pinned.unlisted == [] and pinned.agrees
    cases = {d.case.split(":")[0].split(" ")[0] for d in pinned.differences}
    assert {"surface", "probe", "bwrap"} <= cases  # all three comparisons ran and reported listed rows
    assert pinned.cases > 150
    assert any("proxy rules not compared" in note for note in pinned.notes)


def test_every_listed_difference_carries_a_readme_reason(pinned):
    assert {d.listed for d in pinned.differences} <= pin_listed.all_reasons()


def test_sees_what_0_169_changed():
    report = _run("0.169.0")
    unlisted = sorted(d.case for d in report.unlisted)
    assert report.unavailable is None and not report.agrees
    assert unlisted == ["surface: codex sandbox --transparent-tcp", "surface: codex stdio-to-uds",
                        "surface: codex-linux-sandbox --transparent-tcp"]


@pytest.mark.parametrize("binary", ["/bin/false", "/nonexistent/codex"])
def test_a_side_that_fails_to_run_fails_the_check(binary):
    report = _run("0.171.0", Path(binary))
    assert report.unavailable and not report.agrees


def test_the_layout_is_the_cores(tmp_path, monkeypatch):
    base = Path(pin_sides.scratch())
    try:
        for policy, text in (("read-only", '[filesystem.paths]\n"." = "read"\n'), ("workspace-write", "")):
            tree = pin_sides.Tree.make(base, policy)
            monkeypatch.setenv("HOME", str(tree.home))
            core = layout_for(open_workspace(tree.ws, state_dir=tree.state, policy=text or None))
            ours = pin_sides.layout(tree, policy)
            assert (ours.writable, ours.protected, ours.protected_names, ours.network) == (
                core.writable, core.protected, core.protected_names, core.network)
            assert set(ours.deny_read) <= set(core.deny_read) and str(tree.state) in ours.deny_read
            # the core adds only its own files: the policy file (read) and state roots (none)
            assert {p for p in core.readable if p not in ours.readable} <= {p for p in core.readable if "policy" in p}
    finally:
        pin_sides.remove(base)


def test_probe_comparison_reports_each_kind_of_difference():
    report = PinReport("p", "c", "r")
    theirs = {"write_cwd": "ok", "write_tmp": "EROFS", "ptrace": "EPERM", "gone": "ok"}
    ours = {"write_cwd": "EROFS", "write_tmp": "EACCES", "ptrace": "EPERM"}
    pin_check.compare_probes("bubblewrap", "read-only", ours, theirs, report)
    found = {d.case.split(" ")[1]: d for d in report.differences}
    assert set(found) == {"write_cwd", "write_tmp", "gone"} and all(d.listed is None for d in found.values())
    assert "listed as ours ok, upstream EROFS" in found["write_tmp"].detail  # a listed row with other values
    assert report.cases == 4


def test_surface_comparison_sees_added_and_removed_items():
    report = PinReport("p", "c", "r")
    items = [i for i in pin_listed.SURFACE if i != "codex-linux-sandbox --no-proc"] + ["codex sandbox --new-flag"]
    pin_check.compare_surface(items, report)
    assert sorted(d.case for d in report.unlisted) == ["surface: codex sandbox --new-flag",
                                                       "surface: codex-linux-sandbox --no-proc"]


def test_argv_order_matters_only_for_nested_mounts():
    base = ["--ro-bind / /", "--bind <ws> <ws>", "--ro-bind <ws>/.git <ws>/.git", "--tmpfs <ws>/.codex"]
    siblings = [base[0], base[1], base[3], base[2]]
    assert pin_argv.compare(base, siblings) == []
    nested = [base[0], base[2], base[1], base[3]]
    assert pin_argv.compare(base, nested) == [
        ("order: --bind <ws> <ws> / --ro-bind <ws>/.git <ws>/.git", "upstream runs the first before the second, ours after")]


def test_argv_operations_join_perms_and_normalise():
    names = pin_argv.Names([("/w/ws", "<ws>"), ("/w", "<base>")])
    ops = pin_argv.normalised(["--perms", "0555", "--tmpfs", "/w/ws/.x", "--seccomp", "9", "--setenv", "A", "/w/q",
                               "--", "/bin/echo", "hi"], ["/bin/echo", "hi"], names)
    assert ops == ["--perms 555 --tmpfs <ws>/.x", "--seccomp <fd>", "--setenv A", "run: <command>"]


@pytest.mark.skipif(pin_trace.strace() is None, reason="strace is not installed")
def test_trace_reads_back_arguments_strace_escapes(tmp_path):
    odd = ['a "quoted" word', "back\\slash", "new\nline", "tab\there", "ünï", "\x01"]
    prefix = tmp_path / "t"
    subprocess.run([*pin_trace.wrapper(prefix), "/bin/echo", *odd], check=True, capture_output=True)
    execs = [s for _pid, call, s, _raw in pin_trace.calls(prefix) if call == "execve"]
    assert execs[0][2:] == odd


def test_the_plugin_offers_the_check_through_the_hook():
    (check,) = plugin.codespace_pin_checks()
    assert (check.plugin, check.component) == ("codespace-linux-sandbox", "codex-linux-sandbox")
    assert check.run is pin_check.run


def test_cli_exit_codes():
    _binary("0.171.0")
    env = {**os.environ, "PYTHONPATH": ""}
    bad = subprocess.run([sys.executable, str(CLI), "--release", "v1"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--release must look like rust-v0.171.0" in bad.stderr
    good = subprocess.run([sys.executable, str(CLI), "--ci"], capture_output=True, text=True, env=env, timeout=300)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "0 unlisted" in good.stdout and good.stdout.rstrip().endswith("agrees")

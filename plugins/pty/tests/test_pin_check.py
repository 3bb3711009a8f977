"""The pin check against the real pinned binary, its comparison and its command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract import PinCheck, PinCheckRequest, codex_binary
from codespace_pty.pin_cases import Case, Step, fixed_cases, generated_cases
from codespace_pty.pin_compare import LISTED, PIN_CHECK, compare
from codespace_pty.pin_ours import run_ours
from codespace_pty.pin_upstream import Seen
from codespace_pty.plugin import codespace_pin_checks
from codespace_pty.terminal import PtyTerminal

PLUGIN_DIR = Path(__file__).resolve().parents[1]
SIGTERM_CASE = Case("exit by SIGTERM", "signal", ["/bin/sh", "-c", "kill -TERM $$"])


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_binary("0.171.0", log=lambda line: print(line, file=sys.stderr))


def test_the_hook_offers_the_check():
    checks = codespace_pin_checks()
    assert checks == [PIN_CHECK] and isinstance(checks[0], PinCheck)
    assert (PIN_CHECK.plugin, PIN_CHECK.component) == ("codespace-pty", "codex-utils-pty")


def test_listed_reasons_are_the_readmes_deliberate_differences():
    text = (PLUGIN_DIR / "README.md").read_text()
    section = text.split("### Deliberate differences", 1)[1]
    bullets = re.findall(r"^- (.+)$", section, re.M)
    assert sorted(bullets) == sorted(LISTED.values())


def test_agrees_with_the_pinned_binary(codex):
    report = PIN_CHECK.run(PinCheckRequest("rust-v0.171.0", codex, ci=True, cases=7))
    assert report.unavailable is None
    assert report.cases == len(fixed_cases()) + 7
    assert report.unlisted == [], report.unlisted
    assert report.agrees
    # The signal cases really are seen differing, and are reported with the README's reason.
    signal_cases = [d for d in report.differences if d.case == "exit by SIGTERM"]
    assert signal_cases and signal_cases[0].listed == LISTED["signal"]


def test_a_changed_output_or_code_is_unlisted():
    ours = run_ours(PtyTerminal(), Case("printf", "bulk", ["printf", "a\\n"]))
    assert ours.output == b"a\r\n" and ours.exit_code == 0
    found = compare(Case("printf", "bulk", ["printf", "a\\n"]), ours, Seen(output=b"b\r\n", exit_code=0))
    assert [d.listed for d in found] == [None] and "output" in found[0].detail
    found = compare(Case("exit", "exit", ["true"]), Seen(exit_code=3), Seen(exit_code=4))
    assert [d.listed for d in found] == [None]


def test_signal_difference_is_listed_only_in_its_exact_shape():
    ours = run_ours(PtyTerminal(), SIGTERM_CASE)
    assert ours.exit_code == 143
    assert [d.listed for d in compare(SIGTERM_CASE, ours, Seen(exit_code=1))] == [LISTED["signal"]]
    # Upstream reporting something else than 1 (say 128+N, or another code) is news: unlisted or agreement.
    assert compare(SIGTERM_CASE, ours, Seen(exit_code=143)) == []
    assert [d.listed for d in compare(SIGTERM_CASE, ours, Seen(exit_code=2))] == [None]


def test_a_side_that_did_not_finish_is_unlisted():
    found = compare(SIGTERM_CASE, Seen(exit_code=143), Seen(exit_code=143, problem="step 0: b'x' never appeared"))
    assert [d.listed for d in found] == [None] and "upstream did not complete" in found[0].detail


def test_chunks_over_8_kib_upstream_are_unlisted_ours_listed():
    case = Case("bulk", "bulk", ["true"])
    found = compare(case, Seen(exit_code=0, chunks=[9000]), Seen(exit_code=0, chunks=[9000]))
    assert sorted(str(d.listed) for d in found) == sorted([str(None), LISTED["read_chunk"]])


def test_generated_cases_are_fixed_by_the_seed_and_cover_every_kind():
    first, again = generated_cases(171, 14), generated_cases(171, 14)
    assert first == again and generated_cases(172, 14) != first
    assert {c.kind for c in first} == {"echo", "exit", "signal", "size", "resize", "bulk"}
    typed = [c for c in first if c.kind == "echo"][0]
    assert typed.steps[-1] == Step(b"\x04")


def test_command_line_ci_run_agrees(codex):
    done = subprocess.run([sys.executable, str(PLUGIN_DIR / "pin_check.py"), "--ci", "--no-fetch", "--cases", "3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("codespace-pty codex-utils-pty rust-v0.171.0: agrees")


@pytest.mark.parametrize("arguments, words", [(["--release", "0.171.0"], "--release must be an upstream tag"),
                                              (["--cases", "-1"], "--cases must be 0 or more")])
def test_command_line_refuses_bad_arguments(arguments, words):
    done = subprocess.run([sys.executable, str(PLUGIN_DIR / "pin_check.py"), *arguments],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and words in done.stderr


def test_a_release_that_cannot_be_fetched_is_reported_not_raised(tmp_path):
    done = subprocess.run([sys.executable, str(PLUGIN_DIR / "pin_check.py"), "--release", "rust-v0.0.1", "--no-fetch"],
                          capture_output=True, text=True, timeout=60, env={"CODESPACE_CACHE": str(tmp_path),
                                                                          "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "could not run" in done.stdout and "not in the cache" in done.stdout

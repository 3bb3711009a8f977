"""The plugin's pin check (codespace_patch.pin, hook codespace_pin_checks) and its thin
command pin_check.py, against the real codex binaries in the cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary
from codespace_patch import pin
from codespace_patch.plugin import codespace_pin_checks

PIN_CHECK = Path(__file__).resolve().parents[1] / "pin_check.py"


def _cached(version: str) -> Path | None:
    try:
        return codex_binary(version, fetch=False)
    except OracleUnavailable:
        return None


CODEX_171 = _cached("0.171.0")
CODEX_169 = _cached("0.169.0")
needs_171 = pytest.mark.skipif(CODEX_171 is None, reason="codex 0.171.0 is not cached; run pin_check.py --ci")


def _backend(fs_plugin: str) -> str:
    return "real" if fs_plugin == "fs" else "test"


def test_the_hook_offers_one_check_for_apply_patch():
    checks = codespace_pin_checks()
    assert [(c.plugin, c.component) for c in checks] == [("codespace-patch", "codex-apply-patch")]


@needs_171
def test_the_check_agrees_with_the_pinned_binary(fs_plugin):
    lines: list[str] = []
    request = PinCheckRequest("rust-v0.171.0", CODEX_171, seed=5, cases=6, log=lines.append)
    report = pin.check(request, backend=_backend(fs_plugin))
    assert report.agrees, [f"{d.case}: {d.detail}" for d in report.differences]
    assert report.cases > 6  # the fixtures, then the generated cases
    assert any("6 generated cases, seed 5" in n for n in report.notes)
    assert not any("pins" in n for n in report.notes)  # the declared release is the one checked


@needs_171
def test_an_impostor_binary_is_caught(tmp_path):
    """A binary that applies the patch as upstream does and then leaves one more file: every
    case must differ in its tree."""
    impostor = tmp_path / "codex"
    impostor.write_text(f'#!/bin/sh\n"{CODEX_171}" "$@"; code=$?; echo x > stray.txt; exit $code\n')
    impostor.chmod(0o755)
    report = pin.check(PinCheckRequest("rust-v0.171.0", impostor, seed=5, cases=3))
    assert not report.agrees
    generated = [d for d in report.unlisted if d.case.startswith("seed 5 case ")]
    assert len(generated) == 3 and all("stray.txt" in d.detail for d in generated)
    assert any(d.case.startswith("fixture ") for d in report.unlisted)
    assert "--replay 5:0" in generated[0].case


@pytest.mark.skipif(CODEX_169 is None, reason="codex 0.169.0 is not cached")
def test_another_release_is_a_note_not_a_difference():
    report = pin.check(PinCheckRequest("rust-v0.169.0", CODEX_169, seed=5, cases=3))
    assert report.agrees, [f"{d.case}: {d.detail}" for d in report.differences]
    assert "the package pins rust-v0.171.0; checked against rust-v0.169.0" in report.notes


def _pin_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PIN_CHECK), *args], capture_output=True, text=True, timeout=120)


def test_pin_check_py_refuses_a_release_the_package_does_not_pin():
    done = _pin_check("--codex-version", "0.169.0", "--no-fetch")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL metadata: the package pins rust-v0.171.0; checked against rust-v0.169.0" in done.stdout


@needs_171
def test_pin_check_py_replays_one_case():
    done = _pin_check("--replay", "5:3", "--no-fetch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("pin check: codespace-patch against openai/codex rust-v0.171.0")
    assert "case 5:3 tags" in done.stdout and done.stdout.rstrip().endswith("agree")

"""``codespace pins check``, run as a real subprocess against the real codex binaries.

The third-party plugin ``tests/plugins/codespace_pinprobe`` takes part through the hook;
its check runs the binary it is handed and reports whatever ``CODESPACE_PINPROBE`` asks
for, so every kind of outcome is seen through the command's exit status and output.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess

import pytest

from codespace.contract import OracleUnavailable, codex_binary
from codespace.plugins import ENV_ALLOW

from .conftest import codespace_cmd, subprocess_env


def _cached(version: str) -> bool:
    try:
        codex_binary(version, fetch=False)
    except OracleUnavailable:
        return False
    return True


needs_171 = pytest.mark.skipif(not _cached("0.171.0"), reason="codex 0.171.0 is not cached; run .ci/run once")


def check(*args: str, allow: str = "pinprobe,example", timeout: int = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*codespace_cmd(), "pins", "check", *args], capture_output=True, text=True,
                          timeout=timeout, env=subprocess_env(**{ENV_ALLOW: allow, **env}))


@needs_171
def test_a_third_party_check_that_agrees_passes(tmp_path):
    record = tmp_path / "request.json"
    done = check("--plugin", "pinprobe", CODESPACE_PINPROBE="agree", CODESPACE_PINPROBE_RECORD=str(record))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "codespace-pinprobe / codex-probe: agrees (1 cases" in done.stdout
    assert "note: the probe compares the binary's version only" in done.stdout
    assert done.stdout.splitlines()[-1] == "OK: against openai/codex rust-v0.171.0: 1 agrees"
    seen = json.loads(record.read_text())
    assert seen["release"] == "rust-v0.171.0" and seen["codex"].endswith("/bin/codex")
    assert "pinprobe: mode agree" in done.stderr  # the check's progress goes to stderr


@needs_171
def test_a_listed_difference_is_shown_and_passes():
    done = check("--plugin", "codespace-pinprobe", CODESPACE_PINPROBE="listed")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agrees (2 cases, 1 listed difference(s)" in done.stdout
    assert "listed    probe listed: ours says A, upstream B" in done.stdout
    assert "why: README-probe: we say A on purpose" in done.stdout


@needs_171
def test_an_unlisted_difference_fails_and_comes_first():
    done = check("--plugin", "pinprobe", CODESPACE_PINPROBE="unlisted")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "DIFFERS: 1 unlisted, 1 listed difference(s) (3 cases" in out
    assert out.index("UNLISTED  probe unlisted: ours says C, upstream D") < out.index("listed    probe listed")
    assert out.splitlines()[-1] == "FAILED: against openai/codex rust-v0.171.0: 1 differs"


@needs_171
@pytest.mark.parametrize(("mode", "shown"), [
    ("raise", "codespace-pinprobe / codex-probe: RAISED: RuntimeError: the probe broke on purpose"),
    ("unavailable", "codespace-pinprobe / codex-probe: UNAVAILABLE: the probe's tool is missing on purpose"),
    ("empty", "codespace-pinprobe / codex-probe: UNAVAILABLE: the check compared no case"),
    ("garbage", "codespace-pinprobe / codex-probe: RAISED: the check returned dict, not a codespace.contract.PinReport"),
    ("hook", "codespace-pinprobe: RAISED: hook codespace_pin_checks raised ValueError: the probe's hook broke"),
])
def test_a_check_that_cannot_judge_fails_the_run_without_taking_it_down(mode, shown):
    done = check(CODESPACE_PINPROBE=mode)
    assert done.returncode == 1, done.stdout + done.stderr
    assert shown in done.stdout
    assert done.stdout.splitlines()[-1].startswith("FAILED: against openai/codex rust-v0.171.0")
    assert "Traceback" not in done.stderr or mode == "hook"  # the hook's failure is logged with its traceback


@needs_171
def test_a_pinned_plugin_without_a_check_is_reported():
    both = check(CODESPACE_PINPROBE="agree")
    assert both.returncode == 0, both.stdout + both.stderr  # another check agreed
    assert "codespace-example: no pin check: pins openai/codex rust-v0.171.0 (codex-example)" in both.stdout
    assert both.stdout.splitlines()[-1] == "OK: against openai/codex rust-v0.171.0: 1 agrees, 1 no check"
    alone = check("--plugin", "example")
    assert alone.returncode == 1, alone.stdout + alone.stderr  # no check at all ran
    assert alone.stdout.splitlines()[-1] == "FAILED: against openai/codex rust-v0.171.0: 1 no check"


@needs_171
def test_json_output_and_the_bounds_reach_the_check(tmp_path):
    record = tmp_path / "request.json"
    done = check("--ci", "--seed", "9", "--cases", "7", "--json", CODESPACE_PINPROBE="unlisted",
                 CODESPACE_PINPROBE_RECORD=str(record))
    assert done.returncode == 1
    shown = json.loads(done.stdout)
    assert shown["release"] == "rust-v0.171.0" and shown["ok"] is False
    probe = next(c for c in shown["checks"] if c["plugin"] == "codespace-pinprobe")
    assert probe["status"] == "differs" and probe["cases"] == 3
    assert [d["listed"] is None for d in probe["differences"]] == [False, True]
    assert {c["status"] for c in shown["checks"]} == {"differs", "no check"}
    assert json.loads(record.read_text()) | {"codex": ""} == {
        "release": "rust-v0.171.0", "codex": "", "ci": True, "seed": 9, "cases": 7}


@needs_171
def test_what_a_check_prints_goes_to_stderr_not_into_the_reports():
    done = check("--plugin", "pinprobe", "--json", CODESPACE_PINPROBE="noisy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True
    assert "noise from the check" in done.stderr and "noise from its child" in done.stderr


@pytest.mark.skipif(not _cached("0.169.0"), reason="codex 0.169.0 is not cached")
def test_another_release_hands_over_that_releases_binary():
    done = check("--release", "rust-v0.169.0", "--plugin", "pinprobe", CODESPACE_PINPROBE="agree")
    assert done.returncode == 0, done.stdout + done.stderr  # the probe saw codex-cli 0.169.0
    assert done.stdout.splitlines()[-1] == "OK: against openai/codex rust-v0.169.0: 1 agrees"


@pytest.mark.parametrize(("args", "allow", "message"), [
    (("--release", "0.171.0"), "pinprobe", "--release '0.171.0' is not an upstream tag; write it as rust-vX.Y.Z"),
    (("--release", "rust-v0.171.0; rm -rf /"), "pinprobe", "is not an upstream tag"),
    (("--plugin", "nonesuch"), "pinprobe", "--plugin nonesuch: no such plugin is installed and enabled"),
    ((), "pinprobe,oldpin", "the plugins pin different releases (oldpin: openai/codex rust-v0.170.0; "
                            "pinprobe: openai/codex rust-v0.171.0 (codex-probe)); choose one with --release"),
    (("--plugin", "typo"), "typo", "none of the chosen plugins declares an upstream pin; name the release"),
])
def test_a_command_that_cannot_start_says_what_to_change(args, allow, message):
    done = check(*args, allow=allow)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert done.stdout == ""


def test_an_oracle_that_cannot_be_fetched_fails_every_check(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = check("--release", "rust-v0.171.0", "--plugin", "pinprobe", CODESPACE_CACHE=str(tmp_path / "cache"),
                 PATH=str(empty))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "codespace-pinprobe / codex-probe: UNAVAILABLE: npm is not installed" in done.stdout


@needs_171
@pytest.mark.skipif(importlib.util.find_spec("codespace_patch") is None, reason="codespace-patch is not installed")
def test_the_patch_plugins_check_runs_through_the_command():
    done = check("--plugin", "codespace-patch", "--seed", "5", "--cases", "6", allow="patch,fs", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "codespace-patch / codex-apply-patch: agrees (" in done.stdout
    assert "6 generated cases, seed 5" in done.stdout


@needs_171
def test_a_plugin_that_fails_to_load_fails_the_run():
    done = check("--release", "rust-v0.171.0", allow="pinprobe,broken", CODESPACE_PINPROBE="agree")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "codespace-broken: FAILED TO LOAD: import failed" in done.stdout
    assert "codespace-pinprobe / codex-probe: agrees" in done.stdout

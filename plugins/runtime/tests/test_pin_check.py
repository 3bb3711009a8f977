"""The pin checks against the pinned binary (and 0.169.0's when it is cached): real processes, real
sockets; skipped where the binary is not in the cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract import OracleUnavailable, PinCheckRequest, PinReport, codex_binary
from codespace_runtime import pin_check, pin_listed, pin_uds

DENY = Path(pin_check.__file__).with_name("pin_deny.py")


def binary(version: str) -> Path:
    try:
        return codex_binary(version, fetch=False, log=lambda _text: None)
    except OracleUnavailable as exc:
        pytest.skip(str(exc))


def request(version: str) -> PinCheckRequest:
    return PinCheckRequest(f"rust-v{version}", binary(version), ci=True, log=lambda _text: None)


def test_the_plugin_offers_both_components():
    from codespace_runtime.plugin import codespace_pin_checks

    assert [(c.plugin, c.component) for c in codespace_pin_checks()] == [
        ("codespace-runtime", "codex-uds"), ("codespace-runtime", "codex-process-hardening")]


def test_uds_agrees_with_the_pin():
    report = pin_check.run_uds(request("0.171.0"))
    assert report.unavailable is None, report.unavailable
    assert report.unlisted == [], report.unlisted
    assert report.cases == len(pin_listed.SURFACE) + len(pin_uds.CASES)
    listed = {d.case for d in report.differences}
    assert "socket: directory 0755" in listed and "socket: directory a symlink to a 0700 directory" in listed


def test_hardening_agrees_with_the_pin():
    report = pin_check.run_hardening(request("0.171.0"))
    assert report.unavailable is None, report.unavailable
    assert report.unlisted == [], report.unlisted
    # 3 executables, 3 effects, 2 exit codes
    assert report.cases == 8


def test_0_169_0_shows_stdio_to_uds():
    report = pin_check.run_uds(request("0.169.0"))
    assert [d.case for d in report.unlisted] == ["surface: codex stdio-to-uds"]


def test_an_unknown_surface_item_and_a_vanished_one_are_unlisted():
    report = PinReport("p", "c", "r")
    known = [item for item in pin_listed.SURFACE if item != "codex app-server proxy --sock"]
    pin_check.compare_surface([*known, "codex uds-relay"], report)
    assert sorted(d.case for d in report.unlisted) == ["surface: codex app-server proxy --sock",
                                                       "surface: codex uds-relay"]


def test_a_socket_outcome_that_moved_is_unlisted_even_on_a_listed_case():
    report = PinReport("p", "c", "r")
    refused = pin_uds.Outcome("refused", "dir 0755")
    pin_check.compare_socket_case("directory 0755", refused, pin_uds.Outcome("refused", "dir 0700"), report)
    pin_check.compare_socket_case("directory 0700", refused, pin_uds.Outcome("serving", "dir 0700"), report)
    assert len(report.unlisted) == 2


def test_an_unknown_placement_is_unlisted():
    report = PinReport("p", "c", "r")
    ours = pin_uds.Outcome("serving", "dir 0700", placement="socket 0700 at the path")
    theirs = pin_uds.Outcome("serving", "dir 0700", placement="socket 0666 at the path")
    pin_check.compare_socket_case("directory 0700", ours, theirs, report)
    assert [d.case for d in report.unlisted] == ["socket: directory 0700: placement"]


@pytest.mark.parametrize(("step", "code"), [("dumpable", 5), ("core", 7)])
def test_the_deny_wrapper_makes_our_hardening_exit_with_upstreams_code(step, code):
    program = "from codespace.contract import harden_process; harden_process()"
    done = subprocess.run([sys.executable, "-I", "-S", str(DENY), step, "--", sys.executable, "-c",
                           f"import sys\ntry:\n {program}\nexcept Exception as e:\n sys.exit(e.exit_code)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr


def test_the_deny_wrapper_leaves_reading_limits_alone():
    done = subprocess.run([sys.executable, "-I", "-S", str(DENY), "core", "--", "/bin/sh", "-c",
                           "ulimit -c >/dev/null && ulimit -Hc >/dev/null && echo read; ulimit -Sc 0 2>/dev/null "
                           "|| echo refused"], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["read", "refused"]


@pytest.mark.parametrize("argv", [["bogus", "--", "/bin/true"], ["dumpable", "/bin/true"], []])
def test_the_deny_wrapper_refuses_bad_usage(argv):
    done = subprocess.run([sys.executable, "-I", "-S", str(DENY), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and ("usage" in done.stderr or "unknown step" in done.stderr)

"""The pin check's listed reasons and README.md's "Pin check" table say the same, word for word."""

from __future__ import annotations

from pathlib import Path

from codespace_linux_sandbox import pin_listed

README = Path(__file__).parent.parent / "README.md"


def _table_reasons() -> set[str]:
    text = README.read_text()
    section = text[text.index("### Listed differences"):]
    section = section[:section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| compared")]
    return {row.rstrip(" |").rsplit(" | ", 1)[1] for row in rows}


def test_every_reason_the_check_reports_is_in_the_readme():
    missing = pin_listed.all_reasons() - _table_reasons()
    assert not missing, f"README.md 'Pin check' lacks: {sorted(missing)}"


def test_every_reason_in_the_readme_is_one_the_check_reports():
    stale = _table_reasons() - pin_listed.all_reasons()
    assert not stale, f"README.md 'Pin check' lists reasons the check no longer reports: {sorted(stale)}"


def test_the_table_sees_a_changed_reason(tmp_path, monkeypatch):
    """The comparison itself can fail: a reason edited in the code is missing from the README."""
    monkeypatch.setattr(pin_listed, "INFO_FD", pin_listed.INFO_FD + " (edited)")
    monkeypatch.setattr(pin_listed, "ARGV_DIFFERENCES",
                        [(p, s, pin_listed.INFO_FD if p == "--info-fd <fd>" else w)
                         for p, s, w in pin_listed.ARGV_DIFFERENCES])
    assert pin_listed.all_reasons() - _table_reasons() == {pin_listed.INFO_FD}


def test_the_sysctl_row_is_listed_only_as_root():
    assert "open_sysctl" in pin_listed.probe_differences("bubblewrap", "read-only", root=True)
    assert "open_sysctl" not in pin_listed.probe_differences("bubblewrap", "read-only", root=False)


def test_argv_reasons_match_their_side_only():
    assert pin_listed.argv_reason("--as-pid-1", "upstream only") == pin_listed.AS_PID_1
    assert pin_listed.argv_reason("--as-pid-1", "ours only") is None
    assert pin_listed.argv_reason("--bind / /", "upstream only") is None

"""README.md's "Pin check" section lists every reason the check can report, word for word."""

from __future__ import annotations

import html
from pathlib import Path

from codespace_runtime import pin_listed

README = Path(__file__).resolve().parents[1] / "README.md"


def section() -> str:
    text = README.read_text()
    assert "## Pin check" in text, "README.md has no \"Pin check\" section"
    # The README writes < and > as entities (a bare <uid> is an HTML tag to a Markdown renderer).
    return html.unescape(" ".join(text.split("## Pin check", 1)[1].split("\n## ", 1)[0].split()))


def test_every_listed_reason_is_in_the_readme():
    body = section()
    missing = [why for why in pin_listed.all_reasons() if " ".join(why.split()) not in body]
    assert missing == []


def test_every_listed_case_is_named_in_the_readme():
    body = section()
    names = [*pin_listed.UDS_DIFFERENCES, *pin_listed.HARDENING_DIFFERENCES, *pin_listed.HARDENED_EXECUTABLES]
    assert [name for name in names if name not in body] == []

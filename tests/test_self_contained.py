"""The repository explains itself: the upstream facts its tests and docs rely on are written in
docs/upstream-0.171.0.md, not in a file that only exists on the machine it was written on."""

from __future__ import annotations

import re
import subprocess

from .conftest import REPO

UPSTREAM_DOC = REPO / "docs" / "upstream-0.171.0.md"
TEXT_SUFFIXES = (".py", ".md", ".toml", ".cjs", ".txt", ".cfg", "")


def _tracked_and_new() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines()
    return [p for p in listed if (REPO / p).is_file() and (REPO / p).suffix in TEXT_SUFFIXES]


def test_no_file_points_at_a_behaviour_file_outside_the_repository():
    offenders = []
    for path in _tracked_and_new():
        text = (REPO / path).read_text(errors="replace")
        if "BEHAVIOUR.md" in text and path != "tests/test_self_contained.py":
            offenders.append(path)
    assert offenders == [], f"these name BEHAVIOUR.md (not in the repository; use docs/upstream-0.171.0.md): {offenders}"


def test_the_upstream_doc_names_only_repository_paths_that_exist():
    text = UPSTREAM_DOC.read_text()
    named = set(re.findall(r"`((?:plugins|tests|benchmarks|codespace|docs)/[\w./-]+)`", text))
    assert named, "the doc names no repository file"
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert missing == [], f"docs/upstream-0.171.0.md names files that do not exist: {missing}"
    for fact in ("codex-cli 0.171.0", "--codex-run-as-apply-patch", "reported is 124", "EROFS"):
        assert fact in text

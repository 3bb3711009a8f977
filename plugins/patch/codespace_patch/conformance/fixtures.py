"""The upstream conformance fixtures (``scenarios/``) of the pinned release.

They are upstream's test data, so they are not copied into this repository:
``CODESPACE_PATCH_FIXTURES`` points at them (default: the shared copy of the
pinned release in ``shared/`` beside the checkout, as developers and CI have it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT = str(Path(__file__).resolve().parents[5] / "shared" / "upstream" / "codex-0.171.0" / "scenarios")
ENV = "CODESPACE_PATCH_FIXTURES"


class FixturesMissing(Exception):
    pass


@dataclass(frozen=True)
class Fixture:
    name: str
    patch: str
    input: Path | None
    expected: Path


def fixtures_dir() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT)


def load_fixtures(directory: Path | None = None) -> list[Fixture]:
    directory = directory or fixtures_dir()
    if not directory.is_dir():
        raise FixturesMissing(
            f"upstream fixtures not found at {directory}; set {ENV} to the 'scenarios' directory of "
            "codex-rs/apply-patch/tests/fixtures at the pinned release"
        )
    found = []
    for case in sorted(p for p in directory.iterdir() if (p / "patch.txt").is_file()):
        found.append(Fixture(
            name=case.name,
            patch=(case / "patch.txt").read_text(encoding="utf-8"),
            input=case / "input" if (case / "input").is_dir() else None,
            expected=case / "expected",
        ))
    if not found:
        raise FixturesMissing(f"no fixtures (*/patch.txt) in {directory}")
    return found

"""Every package of every distribution in this repository is declared for its wheel.

An editable install (what ``run.py prepare`` makes) finds a subpackage whether or not
``pyproject.toml`` names it, so a missing one shows only in a wheel: ``pip install .``
of the core once shipped ``codespace`` without ``codespace.contract`` and every other
subpackage, and nothing in the suites noticed.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECTS = [REPO, *sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml"))]


def _on_disk(project: Path, top: str) -> set[str]:
    root = project / top
    return {".".join(init.parent.relative_to(project).parts) for init in root.rglob("__init__.py")
            if "__pycache__" not in init.parts}


def _declared(config: dict, found: set[str]) -> set[str]:
    packages = config.get("packages")
    if isinstance(packages, list):
        return set(packages)
    include = config.get("packages", {}).get("find", {}).get("include", ["*"])
    return {name for name in found if any(fnmatch.fnmatchcase(name, pattern) for pattern in include)}


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name if p != REPO else "core")
def test_every_package_is_in_the_wheel(project: Path) -> None:
    config = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]
    name = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
    top = name.replace("-", "_")
    found = _on_disk(project, top)
    assert top in found, f"{project}: no package {top}"
    missing = found - _declared(config, found)
    assert not missing, f"{name}: {sorted(missing)} would be left out of the wheel (pyproject.toml [tool.setuptools])"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name if p != REPO else "core")
def test_a_package_that_states_its_version_states_its_distributions(project: Path) -> None:
    """A bump of pyproject's version that missed ``__version__`` (which ``codespace plugins`` and the
    plugin tests compare with the installed distribution's) fails here, not in one plugin's venv."""
    import re

    version = tomllib.loads((project / "pyproject.toml").read_text())["project"]["version"]
    stated = {}
    for init in project.glob("*/__init__.py"):
        found = re.search(r'^__version__ = "([^"]+)"$', init.read_text(), re.MULTILINE)
        if found:
            stated[str(init.relative_to(project))] = found.group(1)
    assert all(v == version for v in stated.values()), (version, stated)

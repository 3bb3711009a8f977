"""The plugin API is ``codespace.contract`` (and ``codespace.hookimpl``): the plugins in this
repository use nothing else of the core, and every name the contract offers resolves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import codespace.contract as contract

from .conftest import REPO

ALLOWED_FROM_TOP = {"hookimpl", "__version__"}  # ``from codespace import <name>``


def _plugin_sources() -> list[Path]:
    """This repository's plugins, and the test plugins that stand for an outside author's."""
    return sorted([*REPO.glob("plugins/*/codespace_*/**/*.py"), *REPO.glob("tests/plugins/codespace_*/*.py")])


def _core_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every import of the core below module level too (lazy and
    TYPE_CHECKING imports count: a plugin depending on an internal module breaks the
    day it moves, whenever the import runs)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name == "codespace" or alias.name.startswith("codespace.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "codespace":
                found += [(node.lineno, f"codespace.{alias.name}") for alias in node.names]
            elif node.module.startswith("codespace."):
                found.append((node.lineno, node.module))
    return found


def _allowed(name: str) -> bool:
    if name == "codespace.contract" or name.startswith("codespace.contract."):
        return True
    return name.removeprefix("codespace.") in ALLOWED_FROM_TOP


def test_there_are_plugin_sources():
    assert len(_plugin_sources()) > 40


def test_plugins_import_only_the_contract():
    crossings = []
    for path in _plugin_sources():
        for line, name in _core_imports(ast.parse(path.read_text(), str(path))):
            if not _allowed(name):
                crossings.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not crossings, "plugins may import only codespace.contract and codespace.hookimpl:\n" + "\n".join(crossings)


def test_the_checker_sees_every_kind_of_import():
    source = (
        "import codespace.workspace\n"
        "from codespace import sandboxing\n"
        "from codespace.doctor import Check\n"
        "def f():\n    from codespace.policy.paths import PathRules\n"
        "from codespace import hookimpl\n"
        "from codespace.contract.hardening import harden_process\n"
    )
    bad = [name for _, name in _core_imports(ast.parse(source)) if not _allowed(name)]
    assert bad == ["codespace.workspace", "codespace.sandboxing", "codespace.doctor", "codespace.policy.paths"]


@pytest.mark.parametrize("name", contract.__all__)
def test_every_contract_name_resolves(name):
    assert getattr(contract, name) is not None


def test_contract_import_is_light():
    import subprocess
    import sys

    code = "import sys, codespace.contract; print(sorted(m for m in ('pydantic', 'anyio', 'pluggy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing codespace.contract loaded {out}"

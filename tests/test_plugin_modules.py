"""Every installed plugin's hook module imports light.

The module a ``codespace.plugins`` entry point names is imported by every process that
loads plugins, one-shot helpers included: the patch helper imports each allowed plugin's
to choose its file-system backend (``codespace.contract.helper_plugins``), so a hook
module that imports its mechanism at the top (pydantic, anyio, asyncio, a pty library)
costs every patch an agent applies from a shell. The linux-sandbox and pty plugins' did
(about 150-210 ms each). A hook module defers its mechanism to the hooks that need it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract.installed import entry_points

INSTALLED = entry_points() or []
HEAVY = ("pydantic", "anyio", "asyncio", "pluggy", "ptyprocess", "typing", "logging", "threading",
         "importlib.metadata", "codespace.plugins", "codespace.models")


def _imported(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.skipif(not INSTALLED, reason="no plugin is installed in this environment")
@pytest.mark.parametrize("name, value", INSTALLED, ids=[name for name, _ in INSTALLED])
def test_hook_module_loads_no_mechanism(name: str, value: str) -> None:
    module = value.partition(":")[0].strip()
    by_site = _imported("pass")
    loaded = _imported(f"import {module}")
    heavy = [m for m in HEAVY if m in loaded and m not in by_site]
    assert not heavy, f"plugin {name}: importing {module} loads {heavy}; import them in the hooks that use them"


SHIPPED = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "plugins").iterdir() if (p / "pyproject.toml").is_file())


@pytest.mark.parametrize("plugin", SHIPPED)
def test_shipped_hook_modules_declare_static_hooks_truly(plugin: str) -> None:
    """Each plugin that ships declares CODESPACE_STATIC_HOOKS (the patch helper then need not
    import it while its files are unchanged), and the declaration holds: every hook is a
    function defined at the top of its module, under no condition."""
    import ast

    from codespace.contract.helper_plugins import STATIC_HOOKS

    root = Path(__file__).resolve().parents[1] / "plugins" / plugin
    module = next(root.glob("codespace_*/plugin.py"))
    tree = ast.parse(module.read_text())
    top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    declared = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == STATIC_HOOKS for t in node.targets)]
    assert declared and isinstance(declared[0].value, ast.Constant) and declared[0].value.value is True, module
    hooks = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.name.startswith("codespace_")}
    assert hooks and hooks <= top, f"{module}: hooks not defined at the top of the module: {hooks - top}"

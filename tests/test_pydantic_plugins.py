"""pydantic's plugins do not run in CodeSpace's processes (codespace/pydantic_plugins.py).

A real pydantic plugin, installed as a distribution on the import path: pydantic alone loads
it (so the test can fail); the server, serving tool calls, does not. And the one private
function the server replaces must stay the only thing pydantic takes from its loader.
"""

from __future__ import annotations

import ast
import os
import json
import subprocess
import sys
from pathlib import Path

import pydantic

from .conftest import EXAMPLE_PLUGINS
from .test_stdio_front import INIT, INITIALIZED, replies, serve_lines

SPY = '''
import os

with open(os.environ["SPY_MARK"], "a") as mark:
    mark.write("loaded\\n")


class Spy:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        with open(os.environ["SPY_MARK"], "a") as mark:
            mark.write(f"saw {schema_type_path.name}\\n")
        return None, None, None


plugin = Spy()
'''


def _install_spy(site: Path) -> None:
    site.mkdir()
    (site / "pydantic_spy.py").write_text(SPY)
    info = site / "pydantic_spy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pydantic-spy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nspy = pydantic_spy:plugin\n")


def test_a_pydantic_plugin_pydantic_would_load_is_not_loaded_by_the_server(tmp_path):
    site = tmp_path / "site"
    _install_spy(site)
    mark = tmp_path / "mark"
    env = {"PYTHONPATH": str(site), "SPY_MARK": str(mark)}

    alone = subprocess.run([sys.executable, "-c", "import pydantic\nclass M(pydantic.BaseModel):\n    x: int\n"
                            "M(x=1)\n"], env={**os.environ, **env}, capture_output=True, timeout=60)
    assert alone.returncode == 0, alone.stderr.decode()
    assert "saw M" in mark.read_text(), "pydantic did not load the plugin: this test proves nothing"
    mark.unlink()

    for cache in ("0", "1"):  # the tools built at this start, and then answered from a kept listing
        done = serve_lines(tmp_path, "spied", [
            INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "a"}}},
        ], extra_env={**env, "PYTHONPATH": f"{site}{os.pathsep}{EXAMPLE_PLUGINS}", "CODESPACE_LISTING_CACHE": cache},
            state_home=tmp_path / "xdg")
        answers = replies(done)
        assert json.loads(answers[3])["result"]["isError"] is False, answers[3]
        assert not mark.exists(), mark.read_text()


def test_pydantic_takes_nothing_else_from_its_plugin_loader():
    """The server stands in for ``pydantic.plugin._loader`` with a module that has only
    ``get_plugins``: a pydantic release that uses more of it must be looked at first."""
    root = Path(pydantic.__file__).parent
    taken: set[str] = set()
    for source in root.rglob("*.py"):
        if source.name == "_loader.py":
            continue
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_loader"):
                taken.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_loader":
                taken.add(node.attr)
            elif isinstance(node, ast.Import) and any(a.name.endswith("plugin._loader") for a in node.names):
                taken.add("*")
    assert taken == {"get_plugins"}, taken

"""The plugin on its own: it loads alone with the core, the server works without it, and
``codespace plugins`` says which of the two is the case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from codespace.testing import call_ok

pytestmark = pytest.mark.anyio

CORE_TOOLS = {"workspace_info", "get_operation", "list_operations"}


async def test_loads_alone_with_the_core(mcp_client, ws):
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alone\n")
    async with mcp_client() as client:  # conftest: file_search and nothing else installed beside it
        names = {t.name for t in (await client.list_tools()).tools}
        found = await call_ok(client, "grep", {"pattern": "alone"})
        info = await call_ok(client, "workspace_info", {})
    assert {"grep", "find_files"} <= names and CORE_TOOLS <= names
    assert "walk" not in names or "fs" in json.dumps(info)  # no other plugin's tools were needed
    assert [m["path"] for m in found["matches"]] == ["a.txt"]
    assert "file_search" in json.dumps(info["plugins"] if "plugins" in info else info)


async def test_the_server_works_without_it(mcp_client, ws):
    """With the plugin left out (only the core's own tools: CI's isolated venv has no other
    plugin), the server serves, and a call of grep says the tool is unknown."""
    ws.mkdir(exist_ok=True)
    async with mcp_client(plugins=()) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        info = await call_ok(client, "workspace_info", {})
        missing = await client.call_tool("grep", {"pattern": "x"})
    assert "grep" not in names and "find_files" not in names and CORE_TOOLS <= names
    assert [p["status"] for p in info["plugins"] if p["name"] == "file_search"] in ([], ["blocked"])
    assert missing.is_error and "grep" in missing.content[0].text


def _plugins(env_extra: dict[str, str]) -> dict:
    codespace = os.path.join(os.path.dirname(sys.executable), "codespace")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESPACE_PLUGINS_")}
    out = subprocess.run([codespace, "plugins", "--json"], capture_output=True, text=True, check=True,
                         env={**env, **env_extra}, timeout=120).stdout
    return {p["name"]: p for p in json.loads(out)}


def test_codespace_plugins_is_accurate():
    listed = _plugins({})["file_search"]
    assert listed == {
        "name": "file_search", "status": "loaded", "distribution": "codespace-file-search",
        "version": version("codespace-file-search"),
        "pin": {"project": "openai/codex", "release": "rust-v0.171.0", "components": ["codex-file-search"]},
        "hooks": ["codespace_pin_checks", "codespace_register_tools", "codespace_services"], "error": None,
    }
    blocked = _plugins({"CODESPACE_PLUGINS_BLOCK": "file_search"})
    assert blocked["file_search"]["status"] == "blocked" and blocked["file_search"]["hooks"] == []
    others = {name: p["status"] for name, p in _plugins({}).items() if name != "file_search"}
    assert {name: blocked[name]["status"] for name in others} == others  # the others are unaffected

"""Every hook and every MCP tool is documented, in the code and in the README."""

from __future__ import annotations

import inspect
import re

import pytest

from codespace import hookspecs
from codespace.plugins import ENV_ALLOW, Plugins
from codespace.tooling import ToolRegistry

from .conftest import REPO

HOOKS = [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("codespace_")]


def _tools() -> ToolRegistry:
    registry = ToolRegistry()
    Plugins.load(env={ENV_ALLOW: "(none)"}).register_tools(registry)
    return registry


def test_there_are_hooks_and_tools():
    assert len(HOOKS) >= 7
    assert len(_tools()) >= 11


@pytest.mark.parametrize("hook", HOOKS, ids=lambda f: f.__name__)
def test_hookspec_is_documented(hook):
    doc = inspect.getdoc(hook)
    assert doc and len(doc.splitlines()[0]) > 10, f"{hook.__name__} has no summary line"
    for param in inspect.signature(hook).parameters:
        assert f":param {param}:" in doc, f"{hook.__name__} does not document parameter {param!r}"
    opts = getattr(hook, "codespace_spec", {})
    if opts.get("firstresult"):
        assert "Stops at the first non-None result" in doc, f"{hook.__name__} is firstresult but does not say so"
    if inspect.signature(hook).return_annotation not in ("None", None):
        assert ":return:" in doc, f"{hook.__name__} does not document its return value"


@pytest.mark.parametrize("tool", list(_tools()), ids=lambda t: t.name)
def test_tool_is_documented(tool):
    assert len(tool.description) >= 40, f"{tool.name}: description too short to guide an agent"
    schema = tool.arguments.model_json_schema()
    for name, prop in schema.get("properties", {}).items():
        assert prop.get("description"), f"{tool.name}: argument {name!r} has no description"


def test_readme_documents_every_tool_and_hook():
    readme = (REPO / "README.md").read_text()
    for tool in _tools():
        assert re.search(rf"`{tool.name}`", readme), f"README.md does not mention tool {tool.name}"
    for hook in HOOKS:
        assert f"`{hook.__name__}`" in readme, f"README.md does not mention hook {hook.__name__}"

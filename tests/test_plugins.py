"""Plugin loading: entry points one by one, error isolation, allow/block, pins, listing."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from codespace import hookimpl
from codespace.plugins import ENV_ALLOW, ENV_BLOCK, Plugins, pin_from_metadata
from codespace.testing import call_ok
from codespace.tooling import ToolDefinition, ToolRegistry

from .conftest import codespace_cmd, subprocess_env

EXAMPLES = {"example", "broken", "typo", "oldpin"}


def _by_name(plugins: Plugins) -> dict:
    return {i.name: i for i in plugins.listing()}


def test_broken_plugins_are_reported_and_others_load(example_plugins):
    plugins = Plugins.load(env={ENV_ALLOW: ",".join(EXAMPLES)})
    infos = _by_name(plugins)
    assert infos["broken"].status == "failed"
    assert "ImportError" in infos["broken"].error and "not installed" in infos["broken"].error
    assert infos["typo"].status == "failed"
    assert "codespace_filesytem" in infos["typo"].error and "codespace_filesystem" in infos["typo"].error
    assert infos["example"].status == "loaded"
    assert "codespace_register_tools" in infos["example"].hooks
    assert infos["oldpin"].status == "loaded"


def test_listing_shows_distribution_version_and_pin(example_plugins):
    info = _by_name(Plugins.load(env={ENV_ALLOW: "example"}))["example"]
    assert (info.distribution, info.version) == ("codespace-example", "0.1.0")
    assert info.pin.project == "openai/codex" and info.pin.release == "rust-v0.171.0"
    assert info.pin.components == ("codex-example",)
    assert info.hooks == ["codespace_doctor", "codespace_register_tools", "codespace_services", "codespace_startup"]


def test_block_and_allow_from_environment_and_policy(example_plugins):
    infos = _by_name(Plugins.load(env={ENV_ALLOW: "example,oldpin", ENV_BLOCK: "oldpin"}))
    assert infos["example"].status == "loaded" and infos["oldpin"].status == "blocked"
    assert infos["broken"].status == "blocked"
    infos = _by_name(Plugins.load(allow=["oldpin"], env={}))
    assert infos["oldpin"].status == "loaded" and infos["example"].status == "blocked"
    infos = _by_name(Plugins.load(block=["example"], env={ENV_ALLOW: "example,oldpin"}))
    assert infos["example"].status == "blocked" and infos["oldpin"].status == "loaded"


def test_builtin_tools_come_through_the_same_hook():
    plugins = Plugins.load(env={ENV_ALLOW: "(none)"})
    registry = ToolRegistry()
    plugins.register_tools(registry)
    assert {"workspace_info", "get_operation", "list_operations", "read_file", "apply_patch"} <= {t.name for t in registry}
    assert registry.owners["read_file"] == "codespace.tools.files"
    assert all(i.status == "builtin" for i in plugins.listing(include_builtin=True) if i.name.startswith("codespace."))


class _Duplicate:
    @hookimpl
    def codespace_register_tools(self, register):
        from codespace.tools.operations import GetOperationArgs, OperationView

        async def handler(call, args):
            raise AssertionError("never called")

        register(ToolDefinition(name="get_operation", description="dup", arguments=GetOperationArgs,
                                result=OperationView, handler=handler, read_only=True))
        register(ToolDefinition(name="bad name!", description="x", arguments=GetOperationArgs,
                                result=OperationView, handler=handler, read_only=True))


class _Raises:
    @hookimpl
    def codespace_register_tools(self, register):
        raise RuntimeError("cannot register")

    @hookimpl
    def codespace_filesystem(self, workspace):
        raise RuntimeError("no file system today")


class _Provides:
    @hookimpl
    def codespace_filesystem(self, workspace):
        return SimpleNamespace(kind="fallback")


def test_hook_failures_are_isolated_per_plugin():
    plugins = Plugins.load(env={ENV_ALLOW: "(none)"})
    for name, plugin in (("provides", _Provides()), ("raises", _Raises()), ("dup", _Duplicate())):
        plugins.pm.register(plugin, name=name)
        plugins.infos[name] = SimpleNamespace(error=None)
    registry = ToolRegistry()
    plugins.register_tools(registry)
    assert registry.owners["get_operation"] == "codespace.tools.operations"
    assert "already provided" in plugins.infos["dup"].error
    assert any("bad name!" in problem for _, problem in registry.problems)
    assert "cannot register" in plugins.infos["raises"].error
    backend, provider = plugins.filesystem(workspace=None)
    assert provider == "provides" and backend.kind == "fallback"


def test_pin_parsing():
    pin = pin_from_metadata([
        "Homepage, https://example.org",
        "upstream, https://github.com/openai/codex/tree/rust-v0.171.0",
        "upstream codex-apply-patch, https://github.com/openai/codex/tree/rust-v0.171.0/codex-rs/apply-patch",
    ])
    assert str(pin) == "openai/codex rust-v0.171.0 (codex-apply-patch)"
    assert pin_from_metadata(["Homepage, https://example.org"]) is None


@pytest.mark.anyio
async def test_services_run_while_serving_and_failures_are_contained(mcp_client, tmp_path, monkeypatch, mode):
    marker = tmp_path / "service"
    monkeypatch.setenv("CODESPACE_EXAMPLE_SERVICE_MARKER", str(marker))
    async with mcp_client(mode=mode) as client:
        await call_ok(client, "tally", {"name": "svc"})
        assert marker.read_text() == "running"
        assert (await call_ok(client, "tally", {"name": "svc"}))["count"] == 2


@pytest.mark.anyio
async def test_startup_hook_runs_before_serving(mcp_client, ws, tmp_path, monkeypatch, mode):
    marker = tmp_path / "startup"
    monkeypatch.setenv("CODESPACE_EXAMPLE_STARTUP_MARKER", str(marker))
    async with mcp_client(mode=mode) as client:
        assert marker.read_text().strip() == str(ws.resolve())
        info = await call_ok(client, "workspace_info")
    plugins = {p["name"]: p for p in info["plugins"]}
    assert plugins["example"]["status"] == "loaded" and plugins["broken"]["status"] == "blocked"
    assert plugins["example"]["pin"]["release"] == "rust-v0.171.0"


def _cli(*args: str, allow: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*codespace_cmd(), *args], capture_output=True, text=True, cwd=cwd, timeout=60,
        env=subprocess_env(**{ENV_ALLOW: allow}),
    )


def test_cli_plugins_and_doctor_show_the_broken_plugin(ws, state):
    listing = _cli("plugins", "--state-dir", str(state), allow="example,broken", cwd=ws)
    assert listing.returncode == 1
    assert "broken: failed" in listing.stdout and "ImportError" in listing.stdout
    assert "example: loaded  codespace-example 0.1.0" in listing.stdout
    assert "openai/codex rust-v0.171.0" in listing.stdout
    doctor = _cli("doctor", "--json", "--state-dir", str(state), allow="example,broken", cwd=ws)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert doctor.returncode == 1
    assert checks["plugin broken"]["ok"] is False and "CODESPACE_PLUGINS_BLOCK=broken" in checks["plugin broken"]["hint"]
    assert checks["plugin example"]["ok"] is True
    assert checks["example plugin"]["ok"] is True  # the plugin's own doctor hook
    for name in ("python", "state directory", "operation store", "landlock", "seccomp", "user namespaces", "bubblewrap"):
        assert name in checks


def test_cli_pins_agree_and_disagree(ws, state):
    same = _cli("pins", "--state-dir", str(state), allow="example", cwd=ws)
    assert same.returncode == 0 and "OK: all plugins follow openai/codex rust-v0.171.0" in same.stdout
    different = _cli("pins", "--json", "--state-dir", str(state), allow="example,oldpin", cwd=ws)
    report = json.loads(different.stdout)
    assert different.returncode == 1 and report["same_release"] is False
    assert report["releases"] == ["openai/codex rust-v0.170.0", "openai/codex rust-v0.171.0"]

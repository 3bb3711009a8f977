"""The codespace command line, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess

import pytest

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_error, call_ok, connect

from .conftest import codespace_cmd, subprocess_env


def run(*args: str, cwd=None, allow: str = "example") -> subprocess.CompletedProcess:
    return subprocess.run([*codespace_cmd(), *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=subprocess_env(**{ENV_ALLOW: allow}))


def test_version_and_help():
    assert run("--version").stdout.startswith("codespace ")
    help_text = run("--help").stdout
    for command in ("serve", "plugins", "pins", "doctor", "ops"):
        assert command in help_text


def test_bad_policy_stops_serve_with_file_and_field(ws, state, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text('[network]\naccess = "sometimes"\n')
    result = run("serve", "--workspace", str(ws), "--state-dir", str(state), "--policy", str(policy))
    assert result.returncode == 2
    assert str(policy) in result.stderr and "field 'network.access'" in result.stderr
    assert result.stdout == ""


def test_missing_workspace(tmp_path):
    result = run("serve", "--workspace", str(tmp_path / "nope"))
    assert result.returncode == 2 and "not a directory" in result.stderr


@pytest.mark.anyio
async def test_ops_list_and_show(app_factory, ws, state):
    async with connect(app_factory()) as client:
        await call_ok(client, "tally", {"name": "cli", "operation_id": "cli-1"})
        await call_error(client, "read_file", {"path": "/proc/1/environ"})
    listing = run("ops", "list", "--workspace", str(ws), "--state-dir", str(state))
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert any("cli-1" in line and "tally" in line and "succeeded" in line for line in lines)
    assert any("read_file" in line and "refused" in line and "rule=filesystem.paths['/proc']" in line for line in lines)
    as_json = json.loads(run("ops", "list", "--json", "--status", "refused", "--workspace", str(ws),
                             "--state-dir", str(state)).stdout)
    assert [r["tool"] for r in as_json] == ["read_file"]
    shown = json.loads(run("ops", "show", "cli-1", "--workspace", str(ws), "--state-dir", str(state)).stdout)
    assert shown["status"] == "succeeded" and shown["result"]["count"] == 1
    missing = run("ops", "show", "nope", "--workspace", str(ws), "--state-dir", str(state))
    assert missing.returncode == 1 and "no operation" in missing.stderr

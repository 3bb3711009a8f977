"""codespace.testing as an outside plugin author meets it: a test suite of its own, with no
import of the fixtures, gets them from the pytest11 entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from codespace.testing import WORKER_ENV

SUITE = '''
import pytest

from codespace.testing import call_error, call_ok


@pytest.fixture
def enabled_plugins():
    return ()  # the core's own tools only: the suite must not need any plugin


def test_directories_and_policy_files(ws, state, workspace_parent, write_policy):
    assert ws.is_dir() and not state.exists() and ws.parent == state.parent == workspace_parent
    first, second = write_policy("[limits]\\nmax_sessions = 3\\n"), write_policy("")
    assert first != second and first.parent == workspace_parent and first.read_text().startswith("[limits]")


def test_workspace(make_workspace, workspace, ws, state):
    assert workspace.root == ws and workspace.state_dir == state
    assert make_workspace("[limits]\\nmax_sessions = 3\\n").limits.max_sessions == 3


@pytest.mark.anyio
async def test_mcp_client(mcp_client, make_app, ws, mode):
    (ws / "a.txt").write_text("hello")
    async with mcp_client(mode=mode) as client:
        info = await call_ok(client, "workspace_info")
        assert info["root"] == str(ws) and not [p for p in info["plugins"] if p["status"] == "loaded"]
    async with mcp_client(make_app('[commands]\\ndefault = "deny"\\n')) as client:
        assert (await call_error(client, "exec", {"command": ["true"]}))["rule"] == "commands.default"
'''


def test_an_outside_suite_gets_the_fixtures_from_the_entry_point(tmp_path: Path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_outside.py").write_text(SUITE)
    # Its own basetemp: the default would make pytest prune other runs' numbered temp dirs. Not
    # this run's worker setting either: the outside suite asserts what an author's plain run gets.
    env = {k: v for k, v in os.environ.items() if k != WORKER_ENV}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"--basetemp={tmp_path / 'tmp'}", "suite"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout, run.stdout

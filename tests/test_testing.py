"""codespace.testing as an outside plugin author meets it: a test suite of its own, with no
import of the fixtures, gets them from the pytest11 entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from codespace.testing import APPS_ONLY_ENV, APPS_RECORD_ENV, WORKER_ENV

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


def _run_outside_suite(tmp_path: Path, text: str, *args: str, **env_vars: str) -> subprocess.CompletedProcess:
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_outside.py").write_text(text)
    # Its own basetemp: the default would make pytest prune other runs' numbered temp dirs. Not
    # this run's worker and record settings either: the outside suite asserts what an author's
    # plain run gets.
    env = {k: v for k, v in os.environ.items() if k not in (WORKER_ENV, APPS_RECORD_ENV, APPS_ONLY_ENV)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--basetemp={tmp_path / 'tmp'}", *args, "suite"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**env, **env_vars})


def test_an_outside_suite_gets_the_fixtures_from_the_entry_point(tmp_path: Path):
    run = _run_outside_suite(tmp_path, SUITE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout, run.stdout


APPS_SUITE = '''
import pytest

from codespace.testing import build_app


@pytest.fixture
def app(ws, state):
    return build_app(ws, state_dir=state, plugins=())


def test_no_app(ws):
    assert ws.is_dir()


@pytest.mark.parametrize("n", [1, 2])
def test_app_by_fixture(app, n):
    assert app is not None


def test_app_by_call(make_app):
    make_app()
'''


def test_the_record_names_the_tests_that_built_an_app_and_only_they_run_from_it(tmp_path: Path):
    record = tmp_path / "apps.txt"
    first = _run_outside_suite(tmp_path, APPS_SUITE, **{APPS_RECORD_ENV: str(record)})
    assert "4 passed" in first.stdout, first.stdout + first.stderr
    file = tmp_path / "suite" / "test_outside.py"
    assert record.read_text().splitlines() == [
        f"{file}::test_app_by_fixture[1]", f"{file}::test_app_by_fixture[2]", f"{file}::test_app_by_call"]
    again = _run_outside_suite(tmp_path, APPS_SUITE, **{APPS_ONLY_ENV: str(record)})
    assert again.returncode == 0 and "3 passed, 1 deselected" in again.stdout, again.stdout + again.stderr
    picked = _run_outside_suite(tmp_path, APPS_SUITE, "-k", "by_call", **{APPS_ONLY_ENV: str(record)})
    assert picked.returncode == 0 and "1 passed, 3 deselected" in picked.stdout, picked.stdout + picked.stderr
    # A recorded test its file no longer yields (an id that changes between runs) is an error,
    # not a test quietly left out of the pass.
    changed = _run_outside_suite(tmp_path, APPS_SUITE.replace("[1, 2]", "[1, 3]"), **{APPS_ONLY_ENV: str(record)})
    assert changed.returncode == 4 and "test_app_by_fixture[2]" in changed.stderr, changed.stdout + changed.stderr
    missing = _run_outside_suite(tmp_path, APPS_SUITE, **{APPS_ONLY_ENV: str(tmp_path / "none.txt")})
    assert missing.returncode == 4 and "cannot read" in missing.stderr, missing.stdout + missing.stderr

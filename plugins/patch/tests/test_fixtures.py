"""The upstream conformance fixtures: through the helper executable (upstream mode)
and through real MCP sessions in both patch modes.

The fixtures are upstream's data and are not copied into this repository; see
``conformance/fixtures.py`` for where they are looked up. Missing fixtures fail
the suite rather than skip it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from codespace.testing import connect
from codespace_patch.conformance.fixtures import FixturesMissing, load_fixtures
from codespace_patch.conformance.helper import helper_argv, helper_env, run_helper
from codespace_patch.conformance.trees import copy_tree, describe_difference, snapshot

try:
    FIXTURES = load_fixtures()
    MISSING = ""
except FixturesMissing as exc:
    FIXTURES = []
    MISSING = str(exc)


def test_fixtures_are_present():
    assert not MISSING, MISSING
    assert len(FIXTURES) == 23


def _reset(root: Path, source: Path | None) -> None:
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    copy_tree(source, root)
    for dirpath, _, filenames in os.walk(root):  # the shared copies are read-only
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_fixture_through_the_helper_executable(fixture, tmp_path, fs_plugin):
    root = tmp_path / "ws"
    root.mkdir()
    _reset(root, fixture.input)
    backend = "real" if fs_plugin == "fs" else "test"
    outcome = run_helper(helper_argv(backend), str(root), fixture.patch,
                         helper_env(str(tmp_path / "state"), str(tmp_path), backend))
    got, want = snapshot(root, modes=False), snapshot(fixture.expected, modes=False)
    assert got == want, f"exit {outcome.code}, stderr {outcome.stderr!r}\n" + describe_difference(got, want)
    assert outcome.code in (0, 1)
    assert (outcome.code == 0) == outcome.stdout.startswith(b"Success. Updated the following files:\n")
    assert (outcome.code == 0) == (outcome.stderr == b"")


@pytest.mark.anyio
@pytest.mark.parametrize("patch_mode", ["upstream", "atomic"])
async def test_fixtures_through_mcp(patch_mode, ws, make_app, mode):
    assert FIXTURES, MISSING
    app = make_app()
    async with connect(app, mode=mode) as client:
        for fixture in FIXTURES:
            _reset(ws, fixture.input)
            before = snapshot(ws, modes=False)
            result = await client.call_tool("apply_patch", {"patch": fixture.patch, "mode": patch_mode})
            got, want = snapshot(ws, modes=False), snapshot(fixture.expected, modes=False)
            if patch_mode == "atomic" and result.is_error:
                want = before  # all or nothing
            assert got == want, f"{fixture.name}: {result.content[0].text}\n" + describe_difference(got, want)
            if not result.is_error:
                assert result.structured_content["summary"].startswith("Success. Updated the following files:\n")

"""The helper's loop-free road: upstream mode through a backend's blocking byte methods
(contract.SyncFileBytes), with no event loop; the other roads stay on asyncio.

The outcomes are the binary's: link cases (the one place the store asks more than
read/write/kind/delete) are compared with the pinned codex binary byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL_FS, patch_of, write

from codespace_patch.conformance.helper import helper_argv, helper_env, run_helper
from codespace_patch.conformance.oracle import OracleUnavailable, ensure_oracle, run_oracle
from codespace_patch.conformance.trees import snapshot
from codespace_patch.loop_free import SuspendedError, drive

try:
    ORACLE = ensure_oracle(fetch=False)
except OracleUnavailable:
    ORACLE = None

needs_real_fs = pytest.mark.skipif(not REAL_FS, reason="codespace-fs is not installed in this environment")
needs_oracle = pytest.mark.skipif(ORACLE is None, reason="the pinned codex binary is not cached; run pin_check.py")

HEAVY = ("asyncio", "anyio", "pydantic", "ctypes", "shutil", "hashlib", "platform",
         # The plugin machinery (the core chooses the backend without it when the helper is
         # handed its plugins), dataclasses with the inspect it loads (the core's rules and
         # workspace are plain classes), the command rules' parsers.
         "pluggy", "codespace.plugins", "codespace.hookspecs", "dataclasses", "inspect", "shlex",
         "importlib.metadata",
         # Issue 11 item 10: the helper as a whole process within 1.5x the binary leaves about
         # 5 ms for every import, and each of these cost 1-8 ms (python -X importtime): typing
         # (NamedTuple, Protocol, TYPE_CHECKING), logging and threading (loggers, locks), pathlib
         # (and the urllib.parse and ipaddress it loads), re and enum, functools, collections
         # and contextlib (which typing and functools bring), difflib (failure hints only).
         "typing", "logging", "threading", "pathlib", "urllib.parse", "ipaddress", "re", "enum", "functools",
         "collections", "contextlib", "difflib", "tomllib", "importlib")


def test_drive_returns_what_the_coroutine_returns_and_raises_what_it_raises():
    async def answer() -> int:
        async def inner() -> int:
            return 41

        return await inner() + 1

    async def fails() -> None:
        raise ValueError("from inside")

    assert drive(answer()) == 42
    with pytest.raises(ValueError, match="from inside"):
        drive(fails())


def test_drive_refuses_a_coroutine_that_waits_and_closes_it():
    closed = []

    class Pending:
        def __await__(self):  # noqa: ANN204 - suspends once, as a loop's future would
            yield "waiting"

    async def waits() -> None:
        try:
            await Pending()
        finally:
            closed.append(True)

    with pytest.raises(SuspendedError, match="waited for an event loop"):
        drive(waits())
    assert closed == [True]


def _imports(argv: list[str], ws: Path, env: dict[str, str], patch: str) -> tuple[subprocess.CompletedProcess, set]:
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:], patch], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=60)
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules


def _mixed(ws: Path) -> str:
    write(ws, {"a.txt": "one\ntwo\n", "gone.txt": "x\n", "src/m.txt": "m\n"})
    return patch_of("*** Add File: new/n.txt", "+n", "*** Update File: a.txt", "@@", " one", "-two", "+2",
                    "*** Delete File: gone.txt", "*** Update File: src/m.txt", "*** Move to: dst/m.txt", "-m", "+M")


@needs_real_fs
def test_upstream_mode_over_codespace_fs_loads_no_loop_no_pydantic_no_ffi_package(ws, tmp_path):
    done, modules = _imports(helper_argv("real"), ws, helper_env(str(tmp_path / "s"), str(tmp_path), "real"), _mixed(ws))
    assert done.returncode == 0, done.stderr
    assert {"codespace_patch.loop_free", "codespace_fs.backend"} <= modules
    assert not [m for m in HEAVY if m in modules], f"loaded on the loop-free road: {[m for m in HEAVY if m in modules]}"
    assert (ws / "a.txt").read_text() == "one\n2\n" and (ws / "dst/m.txt").read_text() == "M\n"
    assert not (ws / "gone.txt").exists() and not (ws / "src/m.txt").exists()


INSTALLED_COMMAND = Path(sys.executable).with_name("codespace-apply-patch")


@needs_real_fs
@pytest.mark.skipif(not INSTALLED_COMMAND.exists(), reason="codespace-apply-patch is not beside this interpreter")
def test_the_installed_command_takes_the_same_road_with_every_plugin_installed(ws, tmp_path):
    """As an agent runs it: the script pip installed, ``site`` on, no plugins handed over and
    none filtered out (no CODESPACE_PLUGINS_ALLOW): it reads the entry points without
    importlib.metadata, chooses without pluggy, and no plugin's hook module loads its
    backend. Measured against what ``site`` alone loads in this environment."""
    env = {k: v for k, v in helper_env(str(tmp_path / "s"), str(tmp_path), "real").items()
           if k != "CODESPACE_PLUGINS_ALLOW"}
    bare = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                          env=env, check=True)
    by_site = {line.split("|")[-1].strip() for line in bare.stderr.splitlines() if line.startswith("import time:")}
    done, modules = _imports([sys.executable, str(INSTALLED_COMMAND)], ws, env, _mixed(ws))
    assert done.returncode == 0, done.stderr
    assert {"codespace_patch.loop_free", "codespace_fs.backend", "codespace.contract.installed"} <= modules
    heavy = [m for m in HEAVY if m in modules and m not in by_site]
    assert not heavy, f"loaded by the installed command: {heavy}"
    assert (ws / "a.txt").read_text() == "one\n2\n" and (ws / "dst/m.txt").read_text() == "M\n"


@pytest.mark.parametrize("backend, mode", [("test", "upstream"), ("real", "atomic")])
def test_other_roads_keep_the_event_loop_and_give_the_same_result(ws, tmp_path, backend, mode):
    if backend == "real" and not REAL_FS:
        pytest.skip("codespace-fs is not installed in this environment")
    env = helper_env(str(tmp_path / "s"), str(tmp_path), backend, mode=mode)
    done, modules = _imports(helper_argv(backend), ws, env, _mixed(ws))
    assert done.returncode == 0, done.stderr
    assert "asyncio" in modules and "codespace_patch.loop_free" not in modules
    assert done.stdout == "Success. Updated the following files:\nA new/n.txt\nM a.txt\nM dst/m.txt\nD gone.txt\n"
    assert (ws / "a.txt").read_text() == "one\n2\n" and (ws / "dst/m.txt").read_text() == "M\n"


def _links(root: Path) -> None:
    write(root, {"file.txt": "body\n", "dir/inner.txt": "inner\n", "target.txt": "t1\nt2\n"})
    os.symlink("file.txt", root / "to_file")
    os.symlink("dir", root / "to_dir")
    os.symlink("missing.txt", root / "dangling")
    os.symlink("to_file", root / "to_link")
    os.symlink("target.txt", root / "to_target")
    os.mkfifo(root / "fifo")


LINK_CASES = {
    "delete a link to a file": patch_of("*** Delete File: to_file"),
    "delete a link to a directory": patch_of("*** Delete File: to_dir"),
    "delete a dangling link": patch_of("*** Delete File: dangling"),
    "delete a link to a link": patch_of("*** Delete File: to_link"),
    "delete a directory": patch_of("*** Delete File: dir"),
    "delete a fifo": patch_of("*** Delete File: fifo"),
    "update through a link": patch_of("*** Update File: to_target", "@@", " t1", "-t2", "+T2"),
    # Found here, and older than the loop-free road (the async road does the same): codex creates
    # the link's target, the helper fails with "Failed to write file". Strict, so a fix shows.
    "add over a dangling link": pytest.param(
        patch_of("*** Add File: dangling", "+created through the link"),
        marks=pytest.mark.xfail(strict=True, reason="known divergence on both roads: write through a dangling link")),
    "move a link's target": patch_of("*** Update File: to_target", "*** Move to: moved.txt", "@@", " t1", "-t2", "+x"),
    "update a directory": patch_of("*** Update File: dir", "@@", "-a", "+b"),
}


@needs_real_fs
@needs_oracle
@pytest.mark.parametrize("patch", list(LINK_CASES.values()), ids=list(LINK_CASES))
def test_link_cases_on_the_loop_free_road_match_the_binary(tmp_path, patch):
    theirs, ours = tmp_path / "codex", tmp_path / "helper"
    for root in (theirs, ours):
        root.mkdir()
        _links(root)
    want = run_oracle(ORACLE, str(theirs), patch, str(tmp_path))
    got = run_helper(helper_argv("real"), str(ours), patch, helper_env(str(tmp_path / "s"), str(tmp_path), "real"))
    assert (got.code, got.stdout, got.stderr.replace(str(ours).encode(), b"ROOT")) == (
        want.code, want.stdout, want.stderr.replace(str(theirs).encode(), b"ROOT"))
    assert snapshot(ours) == snapshot(theirs)

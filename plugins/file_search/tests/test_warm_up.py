"""The warm-up: the workspace is walked once soon after start, in the process that runs
find_files, so the first search finds the walk kept; a search during the warm-up waits for
it instead of walking the tree a second time; the switch turns it off."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters

from codespace.testing import call_ok, server_pids, write_policy_file
from codespace_file_search import walk_index, warm_up
from conftest import running_code_names
from codespace_file_search.walk_index import INDEX

pytestmark = pytest.mark.anyio

BIG_LIMITS = "[limits]\nwalk_max_entries = 10000000\nwalk_max_dirs = 1000000\n"


@pytest.fixture
def counted_walks(monkeypatch):
    """The index's real walk, counted (per thread name, to tell the warm-up from a search)."""
    calls: list[str] = []
    real = walk_index.walk

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(walk_index, "walk", counting)
    INDEX.clear()
    yield calls
    INDEX.clear()


def _tree(ws, dirs: int, per_dir: int) -> None:
    for i in range(dirs):
        d = ws / f"d{i}"
        d.mkdir()
        for j in range(per_dir):
            (d / f"f{j}.py").write_text("x")


@pytest.mark.in_process
async def test_the_first_search_finds_the_walk_kept(ws, mcp_client, counted_walks):
    _tree(ws, 20, 10)
    async with mcp_client() as client:
        with anyio.fail_after(10):
            while len(INDEX) == 0:
                await anyio.sleep(0.02)
        assert len(counted_walks) == 1
        got = await call_ok(client, "find_files", {"query": "d7f3"})
        assert got["files"][0]["path"] == "d7/f3.py" and got["entries_walked"] == 1 + 20 * 11
        assert len(counted_walks) == 1, "the search walked again instead of using the warm-up's walk"
        (ws / "d7" / "f3x.py").write_text("x")
        got = await call_ok(client, "find_files", {"query": "d7f3x"})
        assert got["files"][0]["path"] == "d7/f3x.py", "the kept walk missed a file created after it"


@pytest.mark.in_process
async def test_a_search_during_the_warm_up_waits_for_its_walk(ws, mcp_client, counted_walks, monkeypatch):
    for i in range(150):
        for j in range(100):
            os.makedirs(ws / f"d{i}" / f"e{j}")
    monkeypatch.setattr(warm_up, "DELAY_S", 0.0)

    def warm_up_walking() -> bool:
        return any(function == "walk_root" for _, function in running_code_names())

    async with mcp_client(policy=BIG_LIMITS) as client:
        with anyio.fail_after(20):
            while not warm_up_walking():
                await anyio.sleep(0.001)
        got = await call_ok(client, "find_files", {"query": "d149e99"})
    assert got["files"][0]["path"] == "d149/e99" and got["entries_walked"] == 1 + 150 * 101
    assert len(counted_walks) == 1, f"the tree was walked {len(counted_walks)} times"


@pytest.mark.in_process
async def test_the_switch_turns_it_off(ws, mcp_client, counted_walks, monkeypatch):
    _tree(ws, 3, 3)
    monkeypatch.setenv(warm_up.SWITCH, "off")
    monkeypatch.setattr(warm_up, "DELAY_S", 0.0)
    async with mcp_client() as client:
        await call_ok(client, "workspace_info")
        await anyio.sleep(0.5)
        assert counted_walks == [] and len(INDEX) == 0
        await call_ok(client, "find_files", {"query": "f1"})
        assert len(counted_walks) == 1



def _inotify_fds(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return count


def _server(ws, state, policy: str | None, **env: str) -> StdioServerParameters:
    codespace = os.path.join(os.path.dirname(sys.executable), "codespace")
    extra = [] if policy is None else ["--policy", str(write_policy_file(state.parent, policy))]
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("CODESPACE_PLUGINS_", "CODESPACE_TEST_"))}
    return StdioServerParameters(command=codespace, args=["serve", "--workspace", str(ws), "--state-dir", str(state),
                                                           *extra], env={**keep, **env})


async def _watching(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _inotify_fds(pid):
            return True
        await anyio.sleep(0.05)
    return False


async def test_a_served_workspace_is_walked_before_any_search(ws, state):
    """A real stdio server: its walk's inotify watches appear with no search made; with the
    switch off, none do."""
    _tree(ws, 5, 5)
    async with Client(_server(ws, state, None)) as client:
        await call_ok(client, "workspace_info")
        (pid,) = server_pids(state)
        assert await _watching(pid), "no walk was kept 10 s after the server started"
    async with Client(_server(ws, state, None, **{warm_up.SWITCH: "off"})) as client:
        await call_ok(client, "workspace_info")
        (pid,) = server_pids(state)
        await anyio.sleep(1.5)
        assert _inotify_fds(pid) == 0


async def test_with_a_worker_the_worker_walks_and_the_server_does_not(ws, state):
    if importlib.util.find_spec("codespace_runtime") is None:
        pytest.skip("codespace-runtime is not installed (this plugin's isolated run)")
    _tree(ws, 5, 5)
    async with Client(_server(ws, state, '[runtime]\nworker = "child"\n')) as client:
        with anyio.fail_after(10):  # the worker starts with the server, beside its first answers
            while not (runtime := (await call_ok(client, "workspace_info"))["runtime"])["serving"]:
                await anyio.sleep(0.05)
        (pid,) = server_pids(state)
        worker = runtime["pid"]
        assert worker and worker != pid
        assert await _watching(worker), "the worker kept no walk 10 s after it started"
        assert _inotify_fds(pid) == 0, "the server walked the workspace its worker searches"
        got = await call_ok(client, "find_files", {"query": "d4f4"})
        assert got["files"][0]["path"] == "d4/f4.py"

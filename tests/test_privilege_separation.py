"""Privilege separation with the daemon worker (codespace-runtime): the server runs as an
unprivileged uid that cannot read the workspace; the daemon worker runs as the workspace's
owner (root here) and serves every side effect. Real processes: the daemon started with
``codespace-worker start --allow-uid``, the server a ``codespace serve`` as uid 1000 over stdio,
driven by the MCP Python SDK's client."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from .servers import UNPRIVILEGED, make_dir, serve_params, shared_tmp

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the worker and the server as different users"),
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in
                           ("codespace_runtime", "codespace_fs", "codespace_patch")),
                       reason="needs codespace-runtime, codespace-fs and codespace-patch"),
]


def _worker(action: str, ws, env, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codespace_runtime.cli", action, "--workspace", str(ws), *extra],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def layout():
    base = shared_tmp("cs-privsep-")
    os.chmod(base, 0o755)
    ws = base / "ws"
    ws.mkdir(mode=0o700)  # root's: uid 1000 cannot list or read it
    os.chmod(ws, 0o700)
    (ws / "a.txt").write_text("secret content\n")
    policy = base / "policy.toml"
    policy.write_text(f'[runtime]\nworker = "daemon"\ndaemon_dir = "{base / "daemon"}"\n')
    os.chmod(policy, 0o644)
    worker_env = {**os.environ, "CODESPACE_STATE_DIR": str(base / "worker-state"),
                  "CODESPACE_WORKER_POLICY": str(policy)}
    worker_env.pop("CODESPACE_TEST_WORKER", None)
    started = _worker("start", ws, worker_env, "--allow-uid", str(UNPRIVILEGED))
    assert started.returncode == 0, started.stderr
    state = make_dir(base / "server-state", UNPRIVILEGED)
    home = make_dir(base / "home", UNPRIVILEGED)
    yield {"base": base, "ws": ws, "policy": policy, "state": state, "home": home}
    _worker("stop", ws, worker_env)
    shutil.rmtree(base, ignore_errors=True)


async def _call(session: ClientSession, name: str, args: dict | None = None) -> dict:
    result = await session.call_tool(name, args or {})
    assert not result.is_error, f"{name}: {result.content[0].text}"
    return result.structured_content


async def test_an_unprivileged_server_serves_every_tool_through_the_workspace_owners_worker(layout):
    ws = layout["ws"]
    denied = subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups",
                             "cat", str(ws / "a.txt")], capture_output=True, text=True)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr  # the server's uid alone cannot read it

    params = serve_params(ws, layout["state"], layout["home"], uid=UNPRIVILEGED, policy=layout["policy"])
    with anyio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            info = await _call(session, "workspace_info")
            runtime = info["runtime"]
            assert runtime["worker"] == "daemon" and runtime["serving"] is True and runtime["commands"] == "worker"
            assert (await _call(session, "read_file", {"path": "a.txt"}))["content"] == "secret content\n"
            await _call(session, "write_file", {"path": "b.txt", "content": "written\n"})
            assert os.stat(ws / "b.txt").st_uid == 0  # made by the workspace owner's worker
            patched = await _call(session, "apply_patch", {
                "patch": "*** Begin Patch\n*** Update File: b.txt\n-written\n+patched\n*** End Patch"})
            assert patched["applied"] is True and (ws / "b.txt").read_text() == "patched\n"
            listed = await _call(session, "list_dir", {"path": "."})
            assert {e["name"] for e in listed["entries"]} >= {"a.txt", "b.txt"}
            ran = await _call(session, "exec", {"command": ["cat", "a.txt", "b.txt"]})
            assert ran["output"] == "secret content\npatched\n" and ran["exit_code"] == 0
            tty = await _call(session, "exec", {"command": ["bash", "--norc", "-i"], "tty": True, "yield_ms": 500})
            typed = await _call(session, "write_stdin", {"session_id": tty["session_id"], "chars": "echo ok-$((6*7))\n"})
            assert "ok-42" in typed["output"]
            await _call(session, "terminate", {"session_id": tty["session_id"], "signal": "KILL", "grace_ms": 100})
            await _call(session, "move", {"source": "b.txt", "destination": "c.txt"})
            await _call(session, "remove", {"path": "c.txt"})
            assert not (ws / "c.txt").exists()
            found = await _call(session, "find_files", {"query": "a.txt"})
            assert [f["path"] for f in found["files"]][:1] == ["a.txt"]
            grepped = await _call(session, "grep", {"pattern": "secret"})
            assert grepped["matches"][0]["path"].endswith("a.txt")
            assert (await _call(session, "stat", {"path": "a.txt"}))["size"] == len("secret content\n")
            # The reads came back on the fast lane: one end of a socket pair this uid made, served by
            # the owner's daemon (descriptors cross uids).
            assert (await _call(session, "workspace_info"))["runtime"]["fast_lane"] == "open"
            assert any(e["path"].endswith("a.txt") for e in (await _call(session, "walk", {"path": "."}))["entries"])
            # The daemon's directory is hidden from the agent like the state directory.
            hidden = await session.call_tool("read_file", {"path": str(layout["base"] / "daemon" / "worker.pid")})
            assert hidden.is_error and "refused" in hidden.content[0].text

"""The official TypeScript MCP clients, which nobody here wrote, against a real server.

``ts_client.cjs`` calls every tool, each at least once so that it fails, through
``@modelcontextprotocol/sdk`` 1.x (the client inside the MCP Inspector and many agents) and
``@modelcontextprotocol/client`` 2.x, over stdio and over Streamable HTTP with the bearer
token, and checks the text an agent is shown. Both SDKs check a result's structured content
against the tool's output schema and throw when it does not match, so a result that is not
valid never reaches the agent.

The packages come from ``CODESPACE_NODE_MODULES`` (a ``node_modules`` directory; .ci/run
installs them there from npm). Without node or the packages the tests skip, except in CI
(``CI=true``), where they fail: CI must run them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import codespace_cmd, http_serving
from ..servers import UNPRIVILEGED, make_dir, serve_params, shared_tmp

SCRIPT = Path(__file__).with_name("ts_client.cjs")
PACKAGES = {"sdk1": "@modelcontextprotocol/sdk", "client2": "@modelcontextprotocol/client"}
IN_CI = os.environ.get("CI") == "true"


def _node_modules() -> Path | None:
    value = os.environ.get("CODESPACE_NODE_MODULES")
    return Path(value) if value else None


def _require(sdk: str) -> tuple[str, Path]:
    node = shutil.which("node")
    modules = _node_modules()
    missing = None
    if node is None:
        missing = "node is not installed"
    elif modules is None:
        missing = "CODESPACE_NODE_MODULES is not set (a node_modules directory with the MCP client packages)"
    elif not (modules / PACKAGES[sdk] / "package.json").is_file():
        missing = f"{PACKAGES[sdk]} is not installed in {modules}"
    if missing is not None:
        if IN_CI:
            pytest.fail(f"CI must run the TypeScript client tests, but {missing}; .ci/run installs them")
        pytest.skip(missing)
    assert node is not None and modules is not None
    return node, modules


def _server_argv(ws: Path, state: Path, *extra: str) -> list[str]:
    return [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state), *extra]


@contextmanager
def _http_server(ws: Path, state: Path):
    with http_serving(_server_argv(ws, state, "--transport", "http", "--port", "0")) as (url, _):
        yield url, (state / "http-token").read_text().strip()


def _run(node: str, modules: Path, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [node, str(SCRIPT)], env={**os.environ, "CS_NODE_MODULES": str(modules), **env},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"the client printed nothing (exit {done.returncode}); stderr:\n{done.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert not report["failed"], "checks failed:\n" + "\n".join(report["failed"]) + f"\nstderr:\n{done.stderr[-2000:]}"
    assert done.returncode == 0, done.stderr[-3000:]
    return report


@pytest.mark.parametrize("sdk", sorted(PACKAGES))
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_every_tool_through_the_official_typescript_client(ws, state, sdk, transport):
    node, modules = _require(sdk)
    env = {"CS_SDK": sdk, "CS_TRANSPORT": transport, "CS_WORKSPACE": str(ws)}
    if transport == "stdio":
        report = _run(node, modules, {**env, "CS_SERVER_CMD": json.dumps(_server_argv(ws, state))})
    else:
        with _http_server(ws, state) as (url, token):
            report = _run(node, modules, {**env, "CS_URL": url, "CS_TOKEN": token})
    # The built-in tools, each called (the script checks that it called every listed tool).
    assert {"exec", "apply_patch", "read_file", "write_file", "get_operation"} <= set(report["tools"])
    assert report["ok"] > 200


def test_every_tool_with_the_server_as_an_unprivileged_user():
    """The same run over stdio with the server as uid 1000 (CI is root; a user's server is not)."""
    node, modules = _require("sdk1")
    base = shared_tmp("cs-ts-user-", UNPRIVILEGED)
    ws, home = make_dir(base / "ws", UNPRIVILEGED), make_dir(base / "home", UNPRIVILEGED)
    try:
        params = serve_params(ws, base / "state", home, uid=UNPRIVILEGED)
        report = _run(node, modules, {
            "CS_SDK": "sdk1", "CS_TRANSPORT": "stdio", "CS_WORKSPACE": str(ws),
            "CS_SERVER_CMD": json.dumps([params.command, *params.args]), "CS_SERVER_ENV": json.dumps(params.env),
        })
        assert report["ok"] > 200
        assert (ws / "src" / "pkg").stat().st_uid == UNPRIVILEGED  # made by the server, as that user
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_tool_under_the_landlock_engine_with_a_process_limit(ws, state, tmp_path):
    """The same run with the Landlock engine and ``max_processes`` (each command in a user
    namespace of its own): every tool still answers as it does, and workspace_info shows the
    client the engine and what it leaves unenforced (``sandbox.cannot_enforce``)."""
    node, modules = _require("sdk1")
    if importlib.util.find_spec("codespace_linux_sandbox") is None:
        pytest.skip("codespace-linux-sandbox is not installed")
    from codespace import kernel
    from codespace_linux_sandbox.limits import LANDLOCK

    if not kernel.landlock_abi().ok:
        pytest.skip("Landlock is not available on this kernel")
    policy = tmp_path / "policy.toml"
    policy.write_text('[sandbox]\nmode = "required"\nengine = "landlock"\nmax_processes = 512\n')
    wants = ['"engine":"landlock"', json.dumps(LANDLOCK[3])]
    report = _run(node, modules, {
        "CS_SDK": "sdk1", "CS_TRANSPORT": "stdio", "CS_WORKSPACE": str(ws), "CS_INFO_WANTS": json.dumps(wants),
        "CS_SERVER_CMD": json.dumps(_server_argv(ws, state, "--policy", str(policy))),
    })
    assert report["ok"] > 200


def test_every_tool_with_the_sandbox_off_and_a_process_limit(ws, state, tmp_path):
    """The same run with the sandbox off and ``max_processes``: workspace_info shows the client
    how unsandboxed commands are limited, and a command forking past the limit is refused
    (EAGAIN) where the host has a writable cgroup v1 pids hierarchy (CI's does)."""
    node, modules = _require("sdk1")
    from codespace.processes.pids_limit import pids_v1_dir

    pids = pids_v1_dir()
    if pids is None or os.geteuid() != 0 or not os.access(pids, os.W_OK):
        pytest.skip("needs root and a writable cgroup v1 pids hierarchy")
    policy = tmp_path / "policy.toml"
    policy.write_text('[sandbox]\nmode = "off"\nmax_processes = 40\n')
    forks = ("import os, time\nfor n in range(200):\n    try:\n        pid = os.fork()\n    except OSError as exc:\n"
             "        print('refused', exc.errno, 'after', n); break\n    if pid == 0:\n        time.sleep(30); os._exit(0)\n")
    report = _run(node, modules, {
        "CS_SDK": "sdk1", "CS_TRANSPORT": "stdio", "CS_WORKSPACE": str(ws),
        "CS_INFO_WANTS": json.dumps(['"unsandboxed_process_limit":"[sandbox] max_processes, as pids.max']),
        "CS_EXTRA_EXEC": json.dumps({"args": {"command": [sys.executable, "-I", "-S", "-c", forks]},
                                     "wants": ["refused 11 after"]}),
        "CS_SERVER_CMD": json.dumps(_server_argv(ws, state, "--policy", str(policy))),
    })
    assert report["ok"] > 200


def _worker_cli(action: str, ws: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codespace_runtime.cli", action, "--workspace", str(ws)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **env})


@pytest.mark.skipif(importlib.util.find_spec("codespace_runtime") is None, reason="codespace-runtime is not installed")
@pytest.mark.parametrize(("mode", "sdk", "transport"), [
    ("child", "sdk1", "stdio"), ("child", "client2", "http"), ("daemon", "client2", "stdio"), ("daemon", "sdk1", "http")])
def test_every_tool_through_the_hardened_worker(ws, state, tmp_path, mode, sdk, transport):
    """The same run with every workspace side effect in the worker (codespace-runtime): a child
    of the server, or the workspace's daemon. What the agent is shown must not change."""
    node, modules = _require(sdk)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[runtime]\nworker = "{mode}"\n')
    daemon_env = {"CODESPACE_STATE_DIR": str(state), "CODESPACE_WORKER_POLICY": str(policy)}
    if mode == "daemon":
        started = _worker_cli("start", ws, daemon_env)
        assert started.returncode == 0, started.stderr
    try:
        env = {"CS_SDK": sdk, "CS_TRANSPORT": transport, "CS_WORKSPACE": str(ws)}
        argv = _server_argv(ws, state, "--policy", str(policy))
        if transport == "stdio":
            report = _run(node, modules, {**env, "CS_SERVER_CMD": json.dumps(argv)})
        else:
            with http_serving([*argv, "--transport", "http", "--port", "0"]) as (url, _):
                report = _run(node, modules, {**env, "CS_URL": url, "CS_TOKEN": (state / "http-token").read_text().strip()})
    finally:
        if mode == "daemon":
            _worker_cli("stop", ws, daemon_env)
    assert report["ok"] > 200
    seen = json.loads((state / "worker" / "child-status.json").read_text())
    assert seen["worker"] == mode and seen["starts"] >= 1 and "last_failure" not in seen, seen

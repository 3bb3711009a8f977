"""worker = "child" as the agent and the operator see it: workspace_info, doctor, and what
stays in the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import anyio
import importlib.util

import pytest

from codespace.testing import call_error, call_ok, connect

from .test_crash import alive, children, serving, with_cmdline

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]
CHILD = '[runtime]\nworker = "child"\n'


async def test_off_runs_in_the_server_and_claims_no_worker_protocol(make_app, ws):
    (ws / "a.txt").write_text("x\n")
    async with connect(make_app()) as client:
        info = await call_ok(client, "workspace_info")
        assert info["runtime"] == {"worker": "off", "serving": False, "serves": [], "commands": "server"}
        assert info["server"]["protocols"] == {"sandbox_handshake": 1}
        assert (await call_ok(client, "read_file", {"path": "a.txt"}))["content"] == "x\n"
        assert children(os.getpid()) == []


async def test_child_says_what_it_serves_and_runs_commands_in_the_worker(make_app, ws):
    (ws / "a.txt").write_text("x\n")
    async with connect(make_app(policy=CHILD)) as client:
        runtime = await serving(client)
        assert {k: runtime[k] for k in ("worker", "serving", "state", "protocol", "serves", "commands")} == {
            "worker": "child", "serving": True, "state": "serving", "protocol": 5,
            "serves": ["files", "patch", "commands"], "commands": "worker",
        }
        assert children(os.getpid()) == [runtime["pid"]]
        info = await call_ok(client, "workspace_info")
        assert info["server"]["protocols"] == {"sandbox_handshake": 1, "worker_socket": 5}
        assert info["backends"]["filesystem"] == "fs"  # the mechanism; the worker runs it
        # How commands' processes are tracked is the worker's tracker's, not this idle server's.
        tracking = info["sandbox"]["process_tracking"]
        assert tracking == runtime["process_tracking"] and tracking["mechanism"] in ("cgroup", "subreaper"), tracking
        with open(f"/proc/{runtime['pid']}/status") as f:
            assert "\nPPid:\t%d\n" % os.getpid() in f.read()
        ran = await call_ok(client, "exec", {"command": ["sh", "-c", "cat a.txt"]})
        assert ran["output"] == "x\n" and ran["exit_code"] == 0
        # The command is the worker's: its process hangs below the worker.
        long = await call_ok(client, "exec", {"command": ["sleep", "30"], "yield_ms": 100})
        assert runtime["pid"] in _ancestors(long["pid"])
        await call_ok(client, "terminate", {"session_id": long["session_id"], "grace_ms": 100})


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        found.append(pid)
    return found


async def test_a_policy_asking_for_a_worker_without_the_plugin_refuses_file_calls(make_app, ws):
    (ws / "a.txt").write_text("x\n")
    async with connect(make_app(policy=CHILD, plugins=("fs", "patch"))) as client:
        error = await call_error(client, "write_file", {"path": "a.txt", "content": "y", "operation_id": "w-1"})
        assert error["code"] == "backend_missing" and "runtime.worker = 'child'" in error["message"]
        assert "install codespace-runtime" in error["message"] and 'runtime.worker = "off"' in error["message"]
        assert (ws / "a.txt").read_text() == "x\n"
        info = await call_ok(client, "workspace_info")
        assert info["runtime"]["serving"] is False and "no plugin provides a worker" in info["runtime"]["problem"]
        assert "worker_socket" not in info["server"]["protocols"]
        # Nothing ran: no record keeps the operation key.
        missing = await call_error(client, "get_operation", {"operation_id": "w-1"})
        assert "w-1" in missing["message"]


def test_a_bad_runtime_worker_value_names_the_field(ws, tmp_path):
    policy = tmp_path / "bad.toml"
    policy.write_text('[runtime]\nworker = "thread"\n')
    out = subprocess.run([sys.executable, "-m", "codespace", "doctor", "-w", str(ws), "--policy", str(policy),
                          "--state-dir", str(tmp_path / "st")], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "runtime.worker" in out.stderr and "'off', 'child' or 'daemon'" in out.stderr


def _doctor(ws, state, policy) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "codespace", "doctor", "-w", str(ws), "--policy", str(policy),
                          "--state-dir", str(state), "--json"], capture_output=True, text=True, timeout=120)
    return {c["name"]: c for c in json.loads(out.stdout) if c["name"].startswith("runtime worker")}


async def test_doctor_starts_a_worker_and_says_a_servers_worker_died(ws, state, tmp_path):
    from codespace.testing import build_app

    policy_text = CHILD
    checks = _doctor(ws, state, _policy(tmp_path, policy_text))
    assert checks["runtime worker"]["ok"] is True
    assert "answers on protocol 5 and serves files, patch, commands; commands run in the worker" in checks["runtime worker"]["detail"]

    app = build_app(ws, state_dir=state, policy=policy_text)
    async with connect(app) as client:
        pid = (await serving(client))["pid"]
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(5):
            while alive(pid):
                await anyio.sleep(0.01)
        await call_ok(client, "workspace_info")  # the server notices
        checks = _doctor(ws, state, app.workspace.policy_path)
    last = checks["runtime worker (last server)"]
    assert last["ok"] is False and f"the child worker (pid {pid}) killed by SIGKILL while idle" in last["detail"]


def _policy(tmp_path, text: str):
    path = tmp_path / "doctor-policy.toml"
    path.write_text(text)
    return path


async def test_a_clean_stop_records_the_workers_commands_as_cancelled(make_app, ws):
    async with connect(make_app(policy=CHILD)) as client:
        await serving(client)
        long = await call_ok(client, "exec", {"command": ["sleep", "293.5"], "yield_ms": 100, "operation_id": "stop-1"})
        assert long["running"] is True
    with anyio.fail_after(10):  # the command ended with the worker
        while with_cmdline(b"sleep\x00293.5\x00"):
            await anyio.sleep(0.05)
    async with connect(make_app(policy=CHILD)) as client:  # a new server on the same store
        record = await call_ok(client, "get_operation", {"operation_id": "stop-1"})
    assert record["status"] == "cancelled" and "shut down" in record["error"], record
    assert record["result"]["running"] is False



@pytest.mark.skipif(importlib.util.find_spec("codespace_linux_sandbox") is None, reason="needs codespace-linux-sandbox")
async def test_the_sandboxs_services_run_in_the_worker_not_in_the_server(make_app, ws):
    """The egress proxy, warm helper and placeholder sweep serve the sandbox that runs the
    commands: the worker's. The server's own sandbox object, which runs nothing, gets none (a
    sweep there raced the worker's commands and removed their placeholders)."""
    policy = CHILD + '[sandbox]\nmode = "auto"\n[network]\naccess = "allowlist"\nallowed_domains = ["example.com"]\n'
    app = make_app(policy=policy)
    async with connect(app) as client:
        await serving(client)
        out = await call_ok(client, "exec", {"command": ["sh", "-c", "echo $HTTPS_PROXY"]})
        assert out["sandboxed"] and out["exit_code"] == 0 and out["output"].startswith("http://"), out
        local = app.backends.in_process().sandbox()
        assert local.proxy is None, "the server ran an egress proxy for a sandbox it does not use"


@pytest.mark.parametrize("policy_matches", [True, False], ids=["same-policy", "other-policy"])
async def test_a_caller_never_gets_a_worker_whose_policy_is_still_being_checked(make_app, ws, policy_matches):
    """Found in review (a2ec0ec): while the first caller was still reading a new worker's
    report (the policy digest it loaded), a second caller got the connected worker at once,
    and with it a worker whose policy might not be the server's. A second caller now waits
    for the check: it then shares the checked worker, or, when the check failed, starts and
    checks one of its own."""
    import asyncio

    from codespace.contract import RunnerLost
    from codespace_runtime.lifecycle import ChildWorker

    app = make_app(policy=CHILD)
    worker = ChildWorker(app.workspace, record=False)
    if not policy_matches:
        worker.expected_digest = "0" * 64  # as if the worker had loaded another policy file
    try:
        first = asyncio.create_task(worker.client())
        with anyio.fail_after(20):
            while worker._client is None and not first.done():
                await asyncio.sleep(0)
        # The first caller has a connection and is reading the worker's report: no await lies
        # between the two. This is the moment a second caller must not be handed the worker.
        assert not first.done()
        second = asyncio.create_task(worker.client())
        await asyncio.sleep(0)
        assert not second.done(), f"the second caller got {second.result()!r} before the check ended"
        results = await asyncio.gather(first, second, return_exceptions=True)
        if policy_matches:
            assert results[0] is results[1] and worker.serving() and worker.starts == 1
        else:
            assert all(isinstance(r, RunnerLost) for r in results), results
            assert "loaded a different policy" in str(results[1]) and not worker.serving()
            assert worker.starts == 2  # the second caller's own worker, refused for the same reason
    finally:
        await worker.stop()

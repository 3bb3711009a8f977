"""Crash isolation in child mode: kill -9 the worker and the server goes on; kill -9 the server
and its worker goes with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import importlib.util

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from codespace.testing import call_error, call_ok, connect, server_pids

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]
CHILD = '[runtime]\nworker = "child"\n'


def alive(pid: int) -> bool:
    """Not yet a zombie its parent could reap: a killed leader shows "Z" while its other
    threads are still exiting, and until they are gone the process has not ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            zombie = f.read().rsplit(") ", 1)[1][0] == "Z"
        return not zombie or len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` and whose command line names the worker."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"codespace-worker" in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


async def serving(client) -> dict:
    """workspace_info's runtime once the worker the server started with it answers."""
    with anyio.fail_after(20):
        while True:
            runtime = (await call_ok(client, "workspace_info"))["runtime"]
            if runtime["serving"]:
                return runtime
            assert runtime["state"] in ("starting", "not started"), runtime
            await anyio.sleep(0.02)


async def wait_sent(app) -> None:
    """Until the server's connection has the request in flight and its frame written out."""
    client = app.backends.filesystem().worker._client
    with anyio.fail_after(10):
        while not client._pending or client._write.locked():
            await anyio.sleep(0.005)


async def test_kill_9_worker_mid_call_server_stays_up_call_says_so_next_call_restarts(make_app, ws):
    (ws / "a.txt").write_text("before\n")
    app = make_app(policy=CHILD)
    async with connect(app) as client:
        first = await serving(client)
        assert first["serving"] is True and first["worker"] == "child" and first["protocol"] == 5
        pid = first["pid"]
        assert alive(pid) and pid in children(os.getpid())

        os.kill(pid, signal.SIGSTOP)  # the request reaches the socket; the worker never reads it
        outcome: dict = {}

        async def write() -> None:
            outcome["write"] = await call_error(client, "write_file",
                                                {"path": "a.txt", "content": "after\n", "operation_id": "crash-w"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await wait_sent(app)
            os.kill(pid, signal.SIGKILL)

        error = outcome["write"]
        assert error["code"] == "worker_lost"
        assert f"the child worker (pid {pid}) killed by SIGKILL during write_file" in error["message"]
        assert "may have run" in error["message"] and "a new worker starts at the next call" in error["message"]
        assert error["details"]["dispatched"] is True
        assert (ws / "a.txt").read_text() == "before\n"  # a stopped worker ran nothing

        record = await call_ok(client, "get_operation", {"operation_id": "crash-w"})
        assert record["status"] == "interrupted"

        info = await call_ok(client, "workspace_info")
        assert info["runtime"]["serving"] is False and info["runtime"]["state"] == "died"
        assert "killed by SIGKILL" in info["runtime"]["last_failure"]
        assert "worker_socket" not in info["server"]["protocols"]

        again = await call_ok(client, "read_file", {"path": "a.txt"})  # a new child worker serves it
        assert again["content"] == "before\n"
        after = (await call_ok(client, "workspace_info"))["runtime"]
        assert after["serving"] is True and after["pid"] != pid and after["starts"] == 2
        assert (await call_ok(client, "workspace_info"))["server"]["protocols"]["worker_socket"] == 5


async def test_a_worker_dead_between_calls_is_replaced_without_failing_a_call(make_app, ws):
    (ws / "a.txt").write_text("x\n")
    async with connect(make_app(policy=CHILD)) as client:
        pid = (await serving(client))["pid"]
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(5):
            while alive(pid):
                await anyio.sleep(0.01)
        info = (await call_ok(client, "workspace_info"))["runtime"]
        assert info["state"] == "died" and "while idle" in info["last_failure"]
        assert (await call_ok(client, "read_file", {"path": "a.txt"}))["content"] == "x\n"
        assert (await call_ok(client, "workspace_info"))["runtime"]["pid"] not in (None, pid)


async def test_the_worker_stops_with_the_app(make_app, ws):
    async with connect(make_app(policy=CHILD)) as client:
        pid = (await serving(client))["pid"]
        assert alive(pid)
    with anyio.fail_after(5):
        while alive(pid):
            await anyio.sleep(0.01)


def test_kill_9_server_leaves_no_worker(ws, state, tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(CHILD)
    server = subprocess.Popen(
        [sys.executable, "-m", "codespace", "serve", "--workspace", str(ws), "--state-dir", str(state),
         "--policy", str(policy)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:  # the service starts it with the server
            workers = children(server.pid)
            time.sleep(0.05)
        assert len(workers) == 1, "the server started no child worker"
        (worker,) = workers
        server.kill()
        server.wait(10)
        deadline = time.monotonic() + 5
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(worker), f"worker {worker} outlived its server"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_a_killed_worker_takes_its_commands_with_it_and_their_operations_say_so(make_app, ws, sandbox):
    policy = CHILD + f'[sandbox]\nmode = "{sandbox}"\n'
    async with connect(make_app(policy=policy)) as client:
        pid = (await serving(client))["pid"]
        pipe = await call_ok(client, "exec", {"command": ["sleep", "291.37"], "yield_ms": 100, "operation_id": "lost-p"})
        tty = await call_ok(client, "exec", {"command": ["bash", "--norc", "-i"], "tty": True, "yield_ms": 300,
                                             "operation_id": "lost-t"})
        assert pipe["running"] and tty["running"]
        commands = with_cmdline(b"sleep\x00291.37\x00")
        assert commands, "the sleep should be running"
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(20):
            while any(map(alive, commands)):
                await anyio.sleep(0.05)
            for operation_id in ("lost-p", "lost-t"):
                while (record := await call_ok(client, "get_operation", {"operation_id": operation_id}))["status"] == "running":
                    await anyio.sleep(0.05)
                assert record["status"] == "interrupted" and "child worker running this command died" in record["error"]
            while not (runtime := (await call_ok(client, "workspace_info"))["runtime"])["serving"]:
                await anyio.sleep(0.05)
        assert runtime["pid"] != pid
        gone = await call_error(client, "read_output", {"session_id": pipe["session_id"]})
        assert gone["code"] == "no_session"
        again = await call_ok(client, "exec", {"command": ["echo", "still here"]})
        assert again["output"] == "still here\n"


def with_cmdline(cmdline: bytes) -> list[int]:
    """Processes whose command line is exactly ``cmdline`` (NUL-separated, as in /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read() == cmdline:
                        found.append(int(entry))
            except OSError:
                pass
    return found

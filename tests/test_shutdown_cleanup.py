"""The clean-up a stdio server leaves to a detached child at its stop (codespace.processes.janitor):
it starts only once the server has exited, holds none of the server's descriptors, and finishes
(the sandbox's placeholders for missing protected names leave the workspace)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codespace.plugins import ENV_ALLOW

from .conftest import codespace_cmd, subprocess_env

CHILD = """
import os, sys, time
from codespace.processes.janitor import run_detached
marker = sys.argv[1]
def cleanup():
    with open(marker, "w") as f:
        f.write(str(os.getppid()))
pid = run_detached([cleanup])
print(pid, flush=True)
time.sleep(0.3)
print("early" if os.path.exists(marker) else "waited", flush=True)
"""


def test_the_clean_up_waits_for_the_server_to_exit_and_then_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(marker)], capture_output=True, text=True, timeout=30,
                          env=subprocess_env())
    assert proc.returncode == 0, proc.stderr
    child, verdict = proc.stdout.split()
    assert verdict == "waited"  # nothing ran while its server was alive
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "the clean-up never ran after its server exited"
    assert int(child) > 0


def _extra(ws: Path, before: set[str]) -> set[str]:
    return set(os.listdir(ws)) - before


def _rpc(proc: subprocess.Popen, request_id: int, method: str, params: dict) -> dict:
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
                     + b"\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


@pytest.mark.parametrize("how", ["SIGINT", "eof"])
def test_placeholders_of_a_terminal_open_at_the_stop_leave_after_the_exit(ws: Path, state: Path, how: str) -> None:
    before = set(os.listdir(ws))
    proc = subprocess.Popen([*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=subprocess_env(**{ENV_ALLOW: "fs,pty,linux_sandbox"}))
    try:
        _rpc(proc, 1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"name": "raw", "version": "0"}})
        shell = _rpc(proc, 2, "tools/call", {"name": "exec", "arguments": {
            "command": "exec bash -i", "tty": True, "yield_ms": 300}})
        result = shell["result"]["structuredContent"]
        assert result["running"], shell
        if not result.get("sandboxed") or not _extra(ws, before):
            pytest.skip("the default sandbox made no placeholders here (not the bubblewrap engine)")
        if how == "eof":
            proc.stdin.close()
        else:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == (0 if how == "eof" else 130)
        # End of file on the server's output at once: the clean-up child holds none of its pipes.
        ready, _, _ = select.select([proc.stdout], [], [], 2.0)
        assert ready and proc.stdout.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while _extra(ws, before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _extra(ws, before) == set()

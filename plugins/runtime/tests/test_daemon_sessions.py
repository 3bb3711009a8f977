"""worker = "daemon", the reason it exists: command sessions outlive the server that started them.

Real ``codespace serve`` processes over stdio (newline-delimited JSON-RPC, as every MCP client
speaks it) attached to a real daemon worker: the first server is killed with SIGKILL while a
terminal and a long command run; a new server lists both, resumes their output from the cursor
with nothing lost or repeated, writes to the terminal, and holds the exec operations as running
(re-attached, not interrupted). Two servers attached at once see the same sessions."""

from __future__ import annotations

import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from .test_remote_daemon import _worker

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None
    or importlib.util.find_spec("codespace_pty") is None,
    reason="the daemon's sessions need codespace-fs, codespace-patch and codespace-pty")


class StdioServer:
    """One ``codespace serve`` process and a blocking JSON-RPC conversation with it."""

    def __init__(self, ws, state) -> None:
        env = {**os.environ, "CODESPACE_STATE_DIR": str(state)}
        env.pop("CODESPACE_TEST_WORKER", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "codespace", "serve", "--workspace", str(ws), "--state-dir", str(state)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self._ids = iter(range(1, 10_000))
        self._buffer = b""
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "daemon-test", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _line(self, deadline: float) -> dict:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "the server did not answer in time"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the server closed its stdout (exit {self.proc.poll()})"
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, method: str, params: dict, timeout: float = 60.0) -> dict:
        request_id = next(self._ids)
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            message = self._line(deadline)
            if message.get("id") == request_id:
                assert "error" not in message, message
                return message["result"]

    def call(self, tool: str, arguments: dict | None = None) -> dict:
        result = self.request("tools/call", {"name": tool, "arguments": arguments or {}})
        assert not result.get("isError"), result["content"][0]["text"]
        return result["structuredContent"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def daemon(ws, state):
    (ws / ".codespace").mkdir()
    (ws / ".codespace" / "policy.toml").write_text('[runtime]\nworker = "daemon"\n')
    started = _worker("start", ws, state)
    assert started.returncode == 0, started.stderr
    servers: list[StdioServer] = []
    yield lambda: servers.append(StdioServer(ws, state)) or servers[-1]
    for server in servers:
        server.stop()
    _worker("stop", ws, state)


def _read_until(server: StdioServer, session_id: str, after: int, wanted: str, timeout: float = 20.0) -> dict:
    """read_output from ``after`` until ``wanted`` has arrived: (text, next_seq)."""
    text, seq = "", after
    deadline = time.monotonic() + timeout
    while wanted not in text:
        assert time.monotonic() < deadline, f"{wanted!r} never came; got {text!r}"
        out = server.call("read_output", {"session_id": session_id, "after_seq": seq, "wait_ms": 500})
        assert out["seq"] == seq, "output must resume exactly at the cursor"
        text, seq = text + out["output"], out["next_seq"]
    return {"text": text, "next_seq": seq}


def test_sessions_outlive_a_killed_server_and_are_shared(daemon, ws):
    first = daemon()
    counter = first.call("exec", {
        "command": "i=0; while [ $i -lt 400 ]; do echo line-$i; i=$((i+1)); sleep 0.02; done; echo finished",
        "yield_ms": 200, "timeout_ms": 600_000, "operation_id": "count-1"})
    assert counter["running"] is True
    shell = first.call("exec", {"command": ["bash", "--norc", "--noprofile", "-i"], "tty": True,
                                "yield_ms": 500, "operation_id": "shell-1"})
    assert shell["running"] is True
    head = _read_until(first, counter["session_id"], 0, "line-5\n")
    first.kill()

    second = daemon()
    listed = {s["session_id"]: s for s in second.call("list_sessions")["sessions"]}
    assert {counter["session_id"], shell["session_id"]} <= set(listed)
    assert listed[shell["session_id"]]["tty"] is True and listed[counter["session_id"]]["running"] is True

    # The operations were re-attached by the new server, not marked interrupted.
    for operation_id in ("count-1", "shell-1"):
        record = second.call("get_operation", {"operation_id": operation_id})
        assert record["status"] == "running", record

    # Output resumes from the cursor: every line once, in order, none lost while no server ran.
    rest = _read_until(second, counter["session_id"], head["next_seq"], "finished\n", timeout=60)
    lines = (head["text"] + rest["text"]).split()
    assert lines == [*(f"line-{i}" for i in range(400)), "finished"]

    typed = second.call("write_stdin", {"session_id": shell["session_id"], "chars": "echo reached-$((40+2))\n"})
    assert "reached-42" in typed["output"] or "reached-42" in _read_until(
        second, shell["session_id"], typed["next_seq"], "reached-42")["text"]

    # A second server attached at the same time sees the same sessions.
    third = daemon()
    assert shell["session_id"] in {s["session_id"] for s in third.call("list_sessions")["sessions"]}
    ended = third.call("terminate", {"session_id": shell["session_id"], "signal": "KILL", "grace_ms": 100})
    assert ended["running"] is False
    assert shell["session_id"] not in {s["session_id"] for s in second.call("list_sessions")["sessions"]}

    # The counter's end was recorded by the server that adopted it.
    deadline = time.monotonic() + 10
    while (record := second.call("get_operation", {"operation_id": "count-1"}))["status"] == "running":
        assert time.monotonic() < deadline, record
        time.sleep(0.1)
    assert record["status"] == "succeeded" and record["result"]["exit_code"] == 0


def test_an_end_while_no_server_was_attached_is_recorded_by_the_next(daemon, ws):
    first = daemon()
    short = first.call("exec", {"command": "sleep 1; echo late", "yield_ms": 100, "operation_id": "late-1"})
    assert short["running"] is True
    first.kill()
    time.sleep(1.5)  # the command ends while no server is attached
    second = daemon()
    record = second.call("get_operation", {"operation_id": "late-1"})
    assert record["status"] == "succeeded" and record["result"]["exit_code"] == 0, record
    left = second.call("read_output", {"session_id": short["session_id"]})
    assert left["output"] == "late\n" and left["running"] is False

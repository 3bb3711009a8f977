"""Stopping ``codespace serve`` (stdio) the way agents' clients do: SIGINT, SIGTERM or end of
input, with sessions running. A real server subprocess; the time to exit is measured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest

from codespace.plugins import ENV_ALLOW

from .conftest import codespace_cmd, subprocess_env

# Claude Code sends SIGINT, then SIGTERM 100 ms later. Measured here (2 cores, shared with
# other test runs): 56-115 ms with four sessions, one an interactive bash that ignores SIGTERM. The bound is
# for a loaded CI machine; the real numbers are printed (pytest -s shows them).
EXIT_BOUND_S = 0.9


def _alive(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "eof"])
def test_stops_within_the_clients_grace_with_sessions_terminated_and_store_closed(ws, state, how):
    marker = f"31.{uuid.uuid4().int % 10**6:06d}"  # a sleep duration no other process uses
    proc = subprocess.Popen(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=subprocess_env(**{ENV_ALLOW: "example,fs,pty,linux_sandbox"}),
    )

    def call(request_id: int, name: str, arguments: dict) -> dict:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                     "params": {"name": name, "arguments": arguments}}).encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}).encode() + b"\n")
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        for i in range(3):
            started = call(10 + i, "exec", {"command": f"exec sleep {marker}", "yield_ms": 100})
            assert started["result"]["structuredContent"]["running"], started
        shell = call(20, "exec", {"command": "exec bash -i", "tty": True, "yield_ms": 300})
        assert shell["result"]["structuredContent"]["running"], shell
        assert len(_alive(marker)) >= 3  # the sleeps (and their sandbox helpers)
        in_flight = how != "eof"  # at end of input the server first answers what it was asked
        if in_flight:  # an exec call still waiting for its command when the signal comes
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {
                "name": "exec", "arguments": {"command": f"exec sleep {marker}", "yield_ms": 60000}}}).encode() + b"\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 10
            while len(_alive(marker)) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        t0 = time.monotonic()
        if how == "eof":
            proc.stdin.close()
        else:
            proc.send_signal(getattr(signal, how))
        code = proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"\n{how}: exited {code} after {took * 1000:.0f} ms")
    assert code == {"SIGINT": 130, "SIGTERM": 143, "eof": 0}[how], proc.stderr.read().decode()[-2000:]
    assert took < EXIT_BOUND_S, f"{how}: {took * 1000:.0f} ms"
    assert _alive(marker) == []
    # SQLite removes the write-ahead log when the last connection closes cleanly.
    assert not (state / "operations.sqlite3-wal").exists()
    listing = subprocess.run([*codespace_cmd(), "ops", "list", "--json", "--workspace", str(ws),
                              "--state-dir", str(state)], capture_output=True, text=True, timeout=60,
                             env=subprocess_env())
    records = [r for r in json.loads(listing.stdout) if r["tool"] == "exec"]
    assert len(records) == 4 + in_flight, records
    if in_flight:  # its call fails, saying why; it used to "succeed" with exit 143 and replay so
        answer = json.loads(proc.stdout.read().splitlines()[-1])
        assert answer["id"] == 30 and answer["result"]["isError"] is True, answer
        assert "the server shut down while the command ran" in answer["result"]["content"][0]["text"], answer
    # Each record says how its command ended: stopped by the shutdown, and no longer running.
    for record in records:
        shown = subprocess.run([*codespace_cmd(), "ops", "show", record["operation_id"], "--workspace", str(ws),
                                "--state-dir", str(state)], capture_output=True, text=True, timeout=60,
                               env=subprocess_env())
        detail = json.loads(shown.stdout)
        assert detail["status"] == "cancelled", detail
        status = detail["result"].get("error", {}).get("details") or detail["result"]
        assert status["running"] is False and status["signal"] in ("SIGTERM", "SIGKILL"), detail

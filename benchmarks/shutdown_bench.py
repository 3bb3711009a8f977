#!/usr/bin/env python3
"""Time to exit after a client's stop signal, over stdio, side by side with the reference server.

Claude Code stops an MCP server with SIGINT, then SIGTERM 100 ms later, then kills it; the
target is a clean exit (sessions terminated, store closed) within 100 ms. Contenders, in
interleaved rounds, each stopped by SIGINT, SIGTERM and end of input in turn:

- ``codespace+sessions``: ``codespace serve`` with three sandboxed ``sleep`` commands and an
  interactive sandboxed ``bash`` on a terminal (which ignores SIGTERM) running;
- ``codespace``: the same server with no session;
- ``reference``: ``@modelcontextprotocol/server-filesystem`` under node, after one call.

The time is from the signal (or the close of stdin) to the reaped exit, read off raw pipes.
A contender that fails to start, to answer, or to exit with the expected status fails the
benchmark (exit 1); it is never timed.

    python benchmarks/shutdown_bench.py [--rounds 7] [--ref PATH/dist/index.js]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import REFERENCE_FS, real_python

EXPECTED = {"SIGINT": (130, -2), "SIGTERM": (143, -15), "eof": (0,)}


class Failed(Exception):
    pass


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)


def _rpc(proc: subprocess.Popen, request_id: int, method: str, params: dict) -> dict:
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
                     + b"\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise Failed(f"the server closed its output before answering {method}")
        message = json.loads(line)
        if message.get("id") == request_id:
            if "error" in message or message.get("result", {}).get("isError"):
                raise Failed(f"{method} failed: {json.dumps(message)[:300]}")
            return message


def _open(proc: subprocess.Popen) -> None:
    _rpc(proc, 1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "shutdown-bench", "version": "0"}})
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    proc.stdin.flush()


def _stop(proc: subprocess.Popen, how: str) -> float:
    # The exit is seen on a pidfd the moment it happens. (Popen.wait(timeout=...) polls with
    # sleeps doubling up to 50 ms, so it read any exit between 63.5 and 113.5 ms as about 115:
    # the "bimodal" 65 / 115 ms of earlier runs.)
    pidfd = os.pidfd_open(proc.pid)
    try:
        started = time.monotonic()
        if how == "eof":
            proc.stdin.close()
        else:
            proc.send_signal(getattr(signal, how))
        if not select.select([pidfd], [], [], 30)[0]:
            raise Failed(f"no exit within 30 s of {how}")
        took = (time.monotonic() - started) * 1000
    finally:
        os.close(pidfd)
    code = proc.wait()
    if code not in EXPECTED[how]:
        raise Failed(f"exit status {code} after {how}, expected {EXPECTED[how]}")
    return took


def _round(argv: list[str], env: dict[str, str], how: str, load: Callable[[subprocess.Popen], None]) -> float:
    """Start a server, open the session, ``load`` it, let it settle, stop it ``how``: the time to exit."""
    proc = _start(argv, env)
    try:
        _open(proc)
        load(proc)
        time.sleep(0.2)
        return _stop(proc, how)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def codespace_round(ws: str, state: str, how: str, sessions: bool) -> float:
    def load(proc: subprocess.Popen) -> None:
        if not sessions:
            _rpc(proc, 10, "tools/call", {"name": "stat", "arguments": {"path": "."}})
            return
        for i in range(3):
            started = _rpc(proc, 10 + i, "tools/call", {"name": "exec", "arguments": {
                "command": "exec sleep 31.7", "yield_ms": 100}})
            if not started["result"]["structuredContent"]["running"]:
                raise Failed("a sleep command was not running")
        _rpc(proc, 20, "tools/call", {"name": "exec", "arguments": {
            "command": "exec bash -i", "tty": True, "yield_ms": 300}})

    env = {**os.environ, "CODESPACE_PLUGINS_ALLOW": "fs,pty,linux_sandbox"}
    return _round([real_python(), "-m", "codespace", "serve", "--workspace", ws, "--state-dir", state], env, how, load)


def reference_round(ref: str, ws: str, how: str) -> float:
    def load(proc: subprocess.Popen) -> None:
        _rpc(proc, 10, "tools/call", {"name": "get_file_info", "arguments": {"path": ws}})

    return _round([shutil.which("node") or "node", ref, ws], dict(os.environ), how, load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ref", default=str(REFERENCE_FS), help="the reference server's dist/index.js")
    args = parser.parse_args()
    if not Path(args.ref).is_file():
        print(f"shutdown_bench: FAILED: the reference server is not at {args.ref}", file=sys.stderr)
        return 1
    base = Path(tempfile.mkdtemp(prefix="shutdown-bench-", dir="/var/tmp"))
    ws, state = base / "ws", base / "state"
    ws.mkdir()
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for how in EXPECTED:
                for name, run in (("codespace+sessions", lambda h: codespace_round(str(ws), str(state), h, True)),
                                  ("codespace", lambda h: codespace_round(str(ws), str(state), h, False)),
                                  ("reference", lambda h: reference_round(args.ref, str(ws), h))):
                    times.setdefault((name, how), []).append(run(how))
    except Failed as exc:
        print(f"shutdown_bench: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{'contender':<20} {'stop':<8} {'median ms':>10} {'max ms':>8}  (rounds: {args.rounds})")
    for (name, how), values in times.items():
        print(f"{name:<20} {how:<8} {statistics.median(values):10.1f} {max(values):8.1f}")
    for how in EXPECTED:
        ratio = statistics.median(times[("codespace+sessions", how)]) / statistics.median(times[("reference", how)])
        print(f"{how}: codespace with four sessions / reference = {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""exec and terminals, side by side in one run.

1. `exec` of `true`, round trip through MCP (CodeSpace over stdio) versus Desktop
   Commander's `start_process` and a bare `subprocess.run` in this process.
2. PTY echo round trip: CodeSpace `write_stdin` (quiet_ms=0) on a `cat` terminal
   versus a raw ptyprocess write/read loop.
3. PTY throughput: 100 MB through a terminal session (CodeSpace drains it into the
   session buffer) versus a raw ptyprocess read loop.

Usage: python benchmarks/exec_bench.py [--rounds 5] [--n 200]
(needs codespace + codespace-pty installed; Desktop Commander via npm, see README.md)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from ptyprocess import PtyProcess

from harness import DESKTOP_COMMANDER, call_latencies, pct, real_python

PRODUCER = "head -c 104857600 /dev/zero | tr '\\0' a"
TOTAL = 104857600


def codespace_params(ws: str, state: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=real_python(), args=["-m", "codespace", "serve", "--workspace", ws, "--state-dir", state],
        env={**os.environ, "CODESPACE_PLUGINS_ALLOW": "pty"},
    )


def dc_params(ws: str, home: str) -> StdioServerParameters:
    return StdioServerParameters(command=shutil.which("node") or "node", args=[str(DESKTOP_COMMANDER)], cwd=ws,
                                 env={"HOME": home, "PATH": os.environ["PATH"]})


async def exec_roundtrips(params: StdioServerParameters, tool: str, args: dict, n: int, warmup: int) -> list[float]:
    async with Client(params) as client:
        return await call_latencies(client, tool, args, n, warmup)


def subprocess_roundtrips(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["true"], check=True)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def codespace_echo(params: StdioServerParameters, n: int) -> list[float]:
    async with Client(params) as client:
        started = await client.call_tool("exec", {"command": ["cat"], "tty": True, "yield_ms": 0})
        session = started.structured_content["session_id"]
        out = []
        for i in range(n + 5):
            t0 = time.perf_counter()
            result = await client.call_tool("write_stdin", {"session_id": session, "chars": "x\n", "quiet_ms": 0,
                                                            "yield_ms": 5000})
            elapsed = (time.perf_counter() - t0) * 1000
            assert "x" in result.structured_content["output"], result.structured_content
            if i >= 5:
                out.append(elapsed)
        await client.call_tool("terminate", {"session_id": session, "signal": "KILL"})
        return out


def raw_echo(n: int) -> list[float]:
    proc = PtyProcess.spawn(["cat"])
    out = []
    try:
        for i in range(n + 5):
            t0 = time.perf_counter()
            proc.write(b"x\n")
            got = b""
            while b"x" not in got:
                got += proc.read(8192)
            if i >= 5:
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        proc.terminate(force=True)
    return out


async def codespace_throughput(params: StdioServerParameters) -> float:
    async with Client(params) as client:
        t0 = time.perf_counter()
        result = await client.call_tool("exec", {"command": PRODUCER, "tty": True, "yield_ms": 300_000,
                                                 "timeout_ms": 300_000})
        elapsed = time.perf_counter() - t0
        data = result.structured_content
        assert data["exit_code"] == 0 and not data["running"], data
        return elapsed


def raw_throughput() -> float:
    t0 = time.perf_counter()
    proc = PtyProcess.spawn(["sh", "-c", PRODUCER])
    got = 0
    while True:
        try:
            chunk = proc.read(65536)
        except EOFError:
            break
        got += len(chunk)
    proc.wait()
    assert got >= TOTAL, got
    return time.perf_counter() - t0


async def main(args: argparse.Namespace) -> None:
    ws = tempfile.mkdtemp(prefix="cs-bench-ws-")
    state = tempfile.mkdtemp(prefix="cs-bench-state-")
    home = tempfile.mkdtemp(prefix="cs-bench-dc-home-")
    cs = codespace_params(ws, state)
    rows: dict[str, list[float]] = {k: [] for k in ("cs_exec", "dc_exec", "subprocess", "cs_echo", "raw_echo",
                                                       "cs_tput_s", "raw_tput_s")}
    for r in range(args.rounds):
        rows["cs_exec"].append(pct(await exec_roundtrips(cs, "exec", {"command": ["true"]}, args.n, 10), 50))
        if DESKTOP_COMMANDER.exists() and not args.skip_dc:
            rows["dc_exec"].append(pct(await exec_roundtrips(
                dc_params(ws, home), "start_process", {"command": "true", "timeout_ms": 5000}, args.dc_n, 3), 50))
        rows["subprocess"].append(pct(subprocess_roundtrips(args.n), 50))
        rows["cs_echo"].append(pct(await codespace_echo(cs, args.n), 50))
        rows["raw_echo"].append(pct(raw_echo(args.n), 50))
        rows["cs_tput_s"].append(await codespace_throughput(cs))
        rows["raw_tput_s"].append(raw_throughput())
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k}={v[-1]:.3f}" for k, v in rows.items() if v),
              file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    report = {
        "exec_true_p50_ms": {"codespace": med["cs_exec"], "desktop_commander": med.get("dc_exec"),
                             "subprocess_run": med["subprocess"]},
        "ratio_codespace_vs_desktop_commander": round(med["cs_exec"] / med["dc_exec"], 4) if "dc_exec" in med else None,
        "pty_echo_p50_ms": {"codespace_mcp": med["cs_echo"], "raw_ptyprocess": med["raw_echo"]},
        "pty_100MB_seconds": {"codespace": med["cs_tput_s"], "raw_ptyprocess": med["raw_tput_s"]},
        "pty_throughput_ratio_codespace_vs_raw": round(med["raw_tput_s"] / med["cs_tput_s"], 3),
        "rounds": args.rounds, "n": args.n,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--dc-n", type=int, default=20)
    parser.add_argument("--skip-dc", action="store_true")
    anyio.run(main, parser.parse_args())

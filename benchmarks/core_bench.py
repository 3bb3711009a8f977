#!/usr/bin/env python3
"""Core MCP latency and server-ready time, side by side in one run.

- read_file-equivalent call: CodeSpace `read_file` (codespace-fs) versus the reference
  MCP filesystem server's `read_text_file` on the same small file, p50/p99.
- Server-ready time (spawn to initialized session): CodeSpace versus a bare low-level
  `mcp` server (benchmarks/floor_server.py) and the reference server.

Usage: python benchmarks/core_bench.py [--rounds 7] [--n 300] [--mode auto|legacy]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import anyio
from mcp.client.stdio import StdioServerParameters

from harness import REFERENCE_FS, Contender, real_python, rounds

HERE = Path(__file__).resolve().parent


def contenders(ws: str, state: str, mode: str) -> list[Contender]:
    env = {**os.environ, "CODESPACE_PLUGINS_ALLOW": "fs"}
    codespace = StdioServerParameters(
        command=real_python(), args=["-m", "codespace", "serve", "--workspace", ws, "--state-dir", state], env=env
    )
    floor = StdioServerParameters(command=real_python(), args=[str(HERE / "floor_server.py")])
    reference = StdioServerParameters(command=shutil.which("node") or "node", args=[str(REFERENCE_FS), ws])
    return [
        Contender("codespace", codespace, "read_file", {"path": "a.txt"}, mode),
        Contender("reference", reference, "read_text_file", {"path": f"{ws}/a.txt"}, mode),
        Contender("floor", floor, "echo", {}, mode),
    ]


async def main(args: argparse.Namespace) -> None:
    ws = os.path.realpath(tempfile.mkdtemp(prefix="cs-core-ws-"))
    state = tempfile.mkdtemp(prefix="cs-core-state-")
    Path(ws, "a.txt").write_text("hello from a small file\n" * 4)
    results = await rounds(contenders(ws, state, args.mode), rounds=args.rounds, n=args.n, warmup=20)
    report = {
        "results": results,
        "p50_ratio_codespace_vs_reference": round(results["codespace"]["p50_ms"] / results["reference"]["p50_ms"], 3),
        "ready_ratio_codespace_vs_floor": round(results["codespace"]["startup_ms"] / results["floor"]["startup_ms"], 3),
        "rounds": args.rounds, "n": args.n, "mode": args.mode,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    anyio.run(main, parser.parse_args())

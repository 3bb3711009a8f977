#!/usr/bin/env python3
"""grep (codespace-file-search) against rg run directly with the same options, side by side in one run.

Both search the same generated tree (``--files`` files, a few lines each, in nested
directories; its own temporary tree, not the find_files benchmark's) for the same
patterns, interleaved round by round. Contenders:

- ``rg``: the wheel's rg with exactly the argv grep builds (``--json``, ``--binary`` for the
  binary count, the globs), its output read whole from a pipe (rg stops early when
  stdout is /dev/null, so that would not be the same work);
- ``rg (plain)``: ``rg -e PATTERN .`` with the same case, hidden, ignore and glob flags but
  default output and binary handling: what a person would type, to show what JSON and
  ``--binary`` cost rg itself;
- ``grep``: the tool's search in process (open, check, rg, parse, order, page), the
  handler's work without MCP framing;
- ``grep over MCP``: a real in-process MCP session calling the tool.

A contender that fails (non-zero exit, an error result) fails the benchmark.
Also reports the MCP round trip on a small tree. Usage:
python benchmarks/grep_bench.py [--files 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

from codespace.testing import build_app, connect, open_workspace
from codespace_file_search.grep_argv import build_argv, hidden_below, rg_binary
from codespace_file_search.grep_models import GrepArgs
from codespace_file_search.grep_tool import search

WORDS = ["main", "src", "util", "test", "config", "parser", "mod", "lib", "index", "core", "abc", "data"]
CASES = {
    "literal, rare": {"pattern": "needle_42", "literal": True},
    "literal, common": {"pattern": "config", "literal": True},
    "regex, case-insensitive": {"pattern": r"fn\s+pars\w+", "case": "insensitive"},
    "glob *.py, context 2": {"pattern": "return", "include": ["*.py"], "context": 2},
}


def build(root: str, files: int) -> None:
    rng = random.Random(7)
    dirs = []
    for i in range(max(1, files // 50)):
        d = os.path.join(root, rng.choice(WORDS) + str(i % 7), rng.choice(WORDS) + str(i))
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    for i in range(files):
        ext = rng.choice(["rs", "py", "md"])
        lines = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} value {i}" for _ in range(rng.randint(3, 12))]
        if i % 97 == 0:
            lines.append("fn parse_thing() { return config }")
        if i % 5000 == 42:
            lines.append(f"needle_42 in file {i}")
        with open(os.path.join(dirs[i % len(dirs)], f"{rng.choice(WORDS)}_{i}.{ext}"), "w") as f:
            f.write("\n".join(lines) + "\n")


def time_rg(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: no match
        raise SystemExit(f"rg failed (exit {done.returncode}): {done.stderr[-500:]!r}")
    return elapsed


def time_search(args: GrepArgs, workspace) -> float:  # noqa: ANN001
    start = time.perf_counter()
    search(args, workspace.paths, workspace.limits)
    return time.perf_counter() - start


async def time_mcp(client, arguments: dict) -> float:  # noqa: ANN001
    start = time.perf_counter()
    result = await client.call_tool("grep", arguments)
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"grep over MCP failed: {result.content[0].text[:500]}")
    return elapsed


async def run(root: str, state: str, rounds: int) -> dict:
    workspace = open_workspace(root, state_dir=state)
    times: dict[tuple[str, str], list[float]] = {}
    app = build_app(root, state_dir=state, plugins=("file_search",))
    async with connect(app) as client:
        for _ in range(rounds):
            for name, case in CASES.items():
                args = GrepArgs(path=root, **case)
                argv = [rg_binary(), *build_argv(args, hidden_below(workspace.paths, root), single_file=False)]
                plain = [a for a in argv if a not in ("--json", "--binary")]
                times.setdefault((name, "rg"), []).append(time_rg(argv, root))
                times.setdefault((name, "rg (plain)"), []).append(time_rg(plain, root))
                times.setdefault((name, "grep"), []).append(time_search(args, workspace))
                times.setdefault((name, "grep over MCP"), []).append(await time_mcp(client, {"path": ".", **case}))
    return times


async def small_latency(base: str, calls: int = 200) -> tuple[float, float, float]:
    root = os.path.join(base, "small")
    os.makedirs(root)
    for i in range(20):
        with open(os.path.join(root, f"f{i}.txt"), "w") as f:
            f.write(f"line {i}\nneedle {i}\n")
    app = build_app(root, state_dir=os.path.join(base, "small-state"), plugins=("file_search",))
    samples = []
    async with connect(app) as client:
        for _ in range(calls):
            samples.append(await time_mcp(client, {"pattern": "needle"}))
    samples.sort()
    argv = [rg_binary(), *build_argv(GrepArgs(pattern="needle", path=root), [], single_file=False)]
    direct = sorted(time_rg(argv, root) for _ in range(calls))
    return (statistics.median(samples) * 1000, samples[int(len(samples) * 0.9)] * 1000,
            statistics.median(direct) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base = os.path.realpath(tempfile.mkdtemp(prefix="cs-grep-bench-"))
    try:
        root = os.path.join(base, "tree")
        build(root, args.files)
        times = anyio.run(run, root, os.path.join(base, "state"), args.rounds)
        # Median and best of the rounds: on a shared machine the best is the least disturbed.
        for label, pick in (("median", statistics.median), ("best", min)):
            at = {key: pick(values) for key, values in times.items()}
            print(f"grep on {args.files} files, {label} of {args.rounds} (seconds; ratio = contender / rg)")
            print(f"{'case':<26} {'rg':>8} {'rg plain':>9} {'grep':>8} {'ratio':>6} {'MCP':>8} {'ratio':>6}")
            for name in CASES:
                rg, ours, mcp = at[(name, "rg")], at[(name, "grep")], at[(name, "grep over MCP")]
                print(f"{name:<26} {rg:8.3f} {at[(name, 'rg (plain)')]:9.3f} {ours:8.3f} "
                      f"{ours / rg:6.2f} {mcp:8.3f} {mcp / rg:6.2f}")
        p50, p90, rg50 = anyio.run(small_latency, base)
        print(f"MCP round trip, 20-file tree, 200 calls: p50 {p50:.2f} ms, p90 {p90:.2f} ms "
              f"(rg alone, same argv: p50 {rg50:.2f} ms)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

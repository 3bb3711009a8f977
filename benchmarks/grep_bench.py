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
- ``grep over MCP``: a real in-process MCP session calling the tool;
- with ``--baseline DIR``, ``grep (baseline)``: the same in-process search by another copy of
  the ``codespace_file_search`` package (DIR is that package's directory, e.g. an older commit's
  from ``git archive``), so a change is measured before and after in the same interleaved run.

For the in-process searches it also reports CPU time (rusage): the process's own (the
record handling) and rg's (its children). A contender that fails (non-zero exit, an error
result) fails the benchmark. Also reports the MCP round trip on a small tree. Usage:
python benchmarks/grep_bench.py [--files 100000] [--rounds 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

from baseline import import_copy
from codespace.testing import build_app, connect, open_workspace
from codespace_file_search.grep_argv import build_argv, hidden_below, rg_binary
from codespace_file_search.grep_models import GrepArgs
from codespace_file_search.grep_search import search

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


def time_rg(argv: list[str], cwd: str, cpu: list | None = None) -> float:
    own, children = _cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True)
    elapsed = time.perf_counter() - start
    if cpu is not None:
        own_after, children_after = _cpu()
        cpu.append((own_after - own, children_after - children))
    if done.returncode not in (0, 1):  # 1: no match
        raise SystemExit(f"rg failed (exit {done.returncode}): {done.stderr[-500:]!r}")
    return elapsed


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def time_search(args: GrepArgs, workspace, cpu: list, searcher=search) -> float:  # noqa: ANN001
    """Wall time of one search; appends (own CPU, rg's CPU) to ``cpu``."""
    own, children = _cpu()
    start = time.perf_counter()
    searcher(args, workspace.paths, workspace.limits)
    elapsed = time.perf_counter() - start
    own_after, children_after = _cpu()
    cpu.append((own_after - own, children_after - children))
    return elapsed


def load_baseline(package_dir: str):  # noqa: ANN201
    """``search`` of the package copy at ``package_dir``, imported under another name (in
    grep_search since 2026-12-02, in grep_tool before)."""
    load = import_copy(package_dir)
    try:
        return load("grep_search").search
    except ModuleNotFoundError:
        return load("grep_tool").search


async def time_mcp(client, arguments: dict) -> float:  # noqa: ANN001
    start = time.perf_counter()
    result = await client.call_tool("grep", arguments)
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"grep over MCP failed: {result.content[0].text[:500]}")
    return elapsed


async def run(root: str, state: str, rounds: int, baseline) -> tuple[dict, dict]:  # noqa: ANN001
    workspace = open_workspace(root, state_dir=state)
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list] = {}
    app = build_app(root, state_dir=state, plugins=("file_search",))
    async with connect(app) as client:
        for _ in range(rounds):
            for name, case in CASES.items():
                args = GrepArgs(path=root, **case)
                argv = [rg_binary(), *build_argv(args, hidden_below(workspace.paths, root), single_file=False)]
                plain = [a for a in argv if a not in ("--json", "--binary")]
                times.setdefault((name, "rg"), []).append(time_rg(argv, root, cpu.setdefault((name, "rg"), [])))
                times.setdefault((name, "rg (plain)"), []).append(time_rg(plain, root))
                times.setdefault((name, "grep"), []).append(
                    time_search(args, workspace, cpu.setdefault((name, "grep"), [])))
                if baseline is not None:
                    times.setdefault((name, "baseline"), []).append(
                        time_search(args, workspace, cpu.setdefault((name, "baseline"), []), baseline))
                times.setdefault((name, "grep over MCP"), []).append(await time_mcp(client, {"path": ".", **case}))
    return times, cpu


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


def report(times: dict, cpu: dict, files: int, rounds: int, with_baseline: bool) -> None:
    # Median and best of the rounds: on a shared machine the best is the least disturbed.
    for label, pick in (("median", statistics.median), ("best", min)):
        at = {key: pick(values) for key, values in times.items()}
        print(f"grep on {files} files, {label} of {rounds} (seconds; ratio = contender / rg)")
        extra = f" {'baseline':>8} {'ratio':>6}" if with_baseline else ""
        print(f"{'case':<26} {'rg':>8} {'rg plain':>9} {'grep':>8} {'ratio':>6} {'MCP':>8} {'ratio':>6}{extra}")
        for name in CASES:
            rg, ours, mcp = at[(name, "rg")], at[(name, "grep")], at[(name, "grep over MCP")]
            line = (f"{name:<26} {rg:8.3f} {at[(name, 'rg (plain)')]:9.3f} {ours:8.3f} "
                    f"{ours / rg:6.2f} {mcp:8.3f} {mcp / rg:6.2f}")
            if with_baseline:
                line += f" {at[(name, 'baseline')]:8.3f} {at[(name, 'baseline')] / rg:6.2f}"
            print(line)
    print(f"CPU seconds per search (rusage), median of {rounds}: the benchmark's own (reading rg's output, "
          f"or grep's record handling) / rg's")
    for name in CASES:
        parts = []
        for who in ("rg", "grep", "baseline") if with_baseline else ("rg", "grep"):
            own = statistics.median(c[0] for c in cpu[(name, who)])
            rg = statistics.median(c[1] for c in cpu[(name, who)])
            parts.append(f"{who} {own:.3f} / {rg:.3f}")
        print(f"{name:<26} " + "   ".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="directory of another codespace_file_search package to compare")
    args = parser.parse_args()
    baseline = load_baseline(os.path.abspath(args.baseline)) if args.baseline else None
    base = os.path.realpath(tempfile.mkdtemp(prefix="cs-grep-bench-"))
    try:
        root = os.path.join(base, "tree")
        build(root, args.files)
        times, cpu = anyio.run(run, root, os.path.join(base, "state"), args.rounds, baseline)
        report(times, cpu, args.files, args.rounds, baseline is not None)
        p50, p90, rg50 = anyio.run(small_latency, base)
        print(f"MCP round trip, 20-file tree, 200 calls: p50 {p50:.2f} ms, p90 {p90:.2f} ms "
              f"(rg alone, same argv: p50 {rg50:.2f} ms)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

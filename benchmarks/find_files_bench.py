#!/usr/bin/env python3
"""find_files against the pinned binary's app-server fuzzyFileSearch, side by side in one run.

Both search the same generated tree (``--files`` files in nested directories) for the same
queries. Upstream re-walks the tree on every call. Ours keeps its walk (walk_index, inotify)
and is timed six ways: ``cold`` (the kept walk dropped first: the first search of a tree, walk
+ rank), ``warm`` (the kept walk reused: rank only), ``changed`` (a file created in one
directory just before: the kept walk mended there, then rank), and the same through a real MCP
client session with the server (in memory), ``mcp_cold``, ``mcp`` (warm) and ``mcp_changed``. Then the round trip on a small tree
(20 files): find_files over MCP against fuzzyFileSearch over the app-server's stdio.
A contender that fails to run fails the benchmark; result counts must agree.
With ``--baseline DIR`` (another copy of the ``codespace_file_search`` package, e.g. an older
commit's from ``git archive``), that copy's in-process ``warm`` and ``changed`` are timed too,
as ``base_warm`` and ``base_changed``, so a change is measured before and after in one run.

Usage: python benchmarks/find_files_bench.py [--files 100000] [--rounds 3] [--calls 200] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time

import anyio

from baseline import import_copy
from codespace.contract import codex_binary
from codespace.testing import build_app, connect
from codespace_file_search.pin_client import AppServer
from codespace_file_search.query import parse
from codespace_file_search.ranking import rank
from codespace_file_search.walk import Bounds
from codespace_file_search.walk_index import INDEX

QUERIES = ["main", "srcutil", "tst_cfg", "^mod", "'parser", "rs$", "abc xyz"]
WORDS = ["main", "src", "util", "test", "config", "parser", "mod", "lib", "index", "core", "abc", "data"]
BOUNDS = Bounds(entries=10**7, dirs=10**6, seconds=600)
LARGE_POLICY = "[limits]\nwalk_max_entries = 10000000\nwalk_max_dirs = 1000000\n"


def build(root: str, files: int) -> None:
    rng = random.Random(1)
    dirs = []
    for i in range(files // 50):
        d = os.path.join(root, rng.choice(WORDS) + str(i % 7), rng.choice(WORDS) + str(i))
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    for i in range(files):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}{i}.{rng.choice(['rs', 'py', 'md'])}"
        with open(os.path.join(dirs[i % len(dirs)], name), "w"):
            pass


def touch(root: str, made: int) -> int:
    """Create one file in a directory of the tree (a new one each time): the change an agent
    makes between two searches."""
    dirs = sorted(os.listdir(root))
    here = os.path.join(root, dirs[made % len(dirs)])
    with open(os.path.join(here, f"zz_new_{made}.tmp"), "w"):
        pass
    return made + 1


def ours(root: str, query: str, package=None) -> int:  # noqa: ANN001
    """One search in process: by this tree's package, or by ``package`` (see load_baseline)."""
    index, ranker, parser = (INDEX, rank, parse) if package is None else package
    walked, _ = index.walk(root, None, BOUNDS)
    found, _ = ranker(parser(query), walked.entries, memo=walked.memo)
    return len(found)


def load_baseline(package_dir: str) -> tuple:
    """(INDEX, rank, parse) of the package copy at ``package_dir``, imported under another name."""
    load = import_copy(package_dir)
    return load("walk_index").INDEX, load("ranking").rank, load("query").parse


def timed(fn, *args) -> tuple[float, object]:  # noqa: ANN001
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


async def mcp_call(client, query: str) -> tuple[float, int]:  # noqa: ANN001
    start = time.perf_counter()
    result = await client.call_tool("find_files", {"query": query, "limit": 50})
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"find_files over MCP failed: {result.content[0].text[:300]}")
    return elapsed, len(result.structured_content["files"])


async def large(root: str, state: str, server: AppServer, rounds: int, baseline=None) -> dict:  # noqa: ANN001
    kinds = ["upstream", "cold", "warm", "changed", "mcp_cold", "mcp", "mcp_changed"]
    kinds += ["base_warm", "base_changed"] if baseline is not None else []
    times: dict[str, dict[str, list[float]]] = {q: {k: [] for k in kinds} for q in QUERIES}
    made = 0
    app = build_app(root, state_dir=state, plugins=("file_search",), policy=LARGE_POLICY)
    async with connect(app) as client:
        for _ in range(rounds):
            for query in QUERIES:
                t, up = timed(server.fuzzy_file_search, query, [root])
                times[query]["upstream"].append(t)
                INDEX.clear()
                t, cold = timed(ours, root, query)
                times[query]["cold"].append(t)
                t, warm = timed(ours, root, query)
                times[query]["warm"].append(t)
                t, first = await mcp_call(client, query)  # its kept walk was dropped above
                times[query]["mcp_cold"].append(t)
                t, over = await mcp_call(client, query)
                times[query]["mcp"].append(t)
                made = touch(root, made)
                t, changed = timed(ours, root, query)
                times[query]["changed"].append(t)
                made = touch(root, made)
                t, mcp_changed = await mcp_call(client, query)
                times[query]["mcp_changed"].append(t)
                counts = [cold, warm, first, over, changed, mcp_changed]
                if baseline is not None:
                    baseline[0].clear()
                    ours(root, query, baseline)  # its walk, kept, and its buffer
                    t, base_warm = timed(ours, root, query, baseline)
                    times[query]["base_warm"].append(t)
                    made = touch(root, made)
                    t, base_changed = timed(ours, root, query, baseline)
                    times[query]["base_changed"].append(t)
                    baseline[0].clear()
                    counts += [base_warm, base_changed]
                if any(n != len(up) for n in counts):
                    raise SystemExit(f"{query!r}: {len(up)} results upstream, ours {'/'.join(map(str, counts))}")
    out = {}
    for query, by in times.items():
        med = {k: statistics.median(v) * 1000 for k, v in by.items()}
        out[query] = {f"{k}_ms": round(v, 1) for k, v in med.items()}
        out[query].update({f"{k}_ratio": round(med[k] / med["upstream"], 2)
                           for k in kinds if k != "upstream"})
    return out


async def small(base: str, server: AppServer, calls: int) -> dict:
    root = os.path.join(base, "small")
    os.makedirs(root)
    for i in range(20):
        with open(os.path.join(root, f"{WORDS[i % len(WORDS)]}_{i}.py"), "w"):
            pass
    mine, theirs = [], []
    async with connect(build_app(root, state_dir=os.path.join(base, "small-state"), plugins=("file_search",))) as client:
        for _ in range(calls):
            mine.append((await mcp_call(client, "main"))[0])
            theirs.append(timed(server.fuzzy_file_search, "main", [root])[0])
    mine.sort()
    theirs.sort()
    pick = lambda xs, p: round(xs[int(len(xs) * p)] * 1000, 2)  # noqa: E731
    return {"find_files_mcp_p50_ms": pick(mine, 0.5), "find_files_mcp_p90_ms": pick(mine, 0.9),
            "fuzzyFileSearch_p50_ms": pick(theirs, 0.5), "fuzzyFileSearch_p90_ms": pick(theirs, 0.9),
            "p50_ratio": round(pick(mine, 0.5) / pick(theirs, 0.5), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--baseline", help="directory of another codespace_file_search package to compare")
    args = parser.parse_args()
    baseline = load_baseline(os.path.abspath(args.baseline)) if args.baseline else None
    base = os.path.realpath(tempfile.mkdtemp(prefix="cs-find-bench-"))
    try:
        root = os.path.join(base, "tree")
        build(root, args.files)
        with AppServer(codex_binary("0.171.0", fetch=False), timeout=600) as server:
            results = anyio.run(large, root, os.path.join(base, "state"), server, args.rounds, baseline)
            latency = anyio.run(small, base, server, args.calls)
        print(json.dumps({"files": args.files, "rounds": args.rounds, "cpus": os.cpu_count(),
                          "large": results, "small_tree_round_trip": latency}, indent=2))
    finally:
        INDEX.clear()
        if baseline is not None:
            baseline[0].clear()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

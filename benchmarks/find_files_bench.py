#!/usr/bin/env python3
"""find_files against the pinned binary's app-server fuzzyFileSearch, side by side in one run.

Both search the same generated tree (``--files`` files in nested directories) for the same
queries; each call re-walks the tree (upstream does; so do we). Ours is timed in process
(walk + rank, the tool handler's work without MCP framing); a contender that fails to run
fails the benchmark.

Usage: python benchmarks/find_files_bench.py [--files 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from codespace.contract import codex_binary
from codespace_file_search.pin_client import AppServer
from codespace_file_search.query import parse
from codespace_file_search.ranking import rank
from codespace_file_search.walk import Bounds, walk

QUERIES = ["main", "srcutil", "tst_cfg", "^mod", "'parser", "rs$", "abc xyz"]
WORDS = ["main", "src", "util", "test", "config", "parser", "mod", "lib", "index", "core", "abc", "data"]


def build(root: str, files: int) -> None:
    rng = random.Random(1)
    dirs = []
    for i in range(files // 50):
        d = os.path.join(root, rng.choice(WORDS) + str(i % 7), rng.choice(WORDS) + str(i))
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    for i in range(files):
        with open(os.path.join(dirs[i % len(dirs)], f"{rng.choice(WORDS)}_{rng.choice(WORDS)}{i}.{rng.choice(['rs', 'py', 'md'])}"), "w"):
            pass


def ours(root: str, query: str) -> int:
    found, _ = rank(parse(query), walk(root, None, Bounds(entries=10**7, dirs=10**6, seconds=600)).entries)
    return len(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = os.path.realpath(tempfile.mkdtemp(prefix="cs-find-bench-"))
    try:
        build(root, args.files)
        with AppServer(codex_binary("0.171.0", fetch=False), timeout=600) as server:
            results = {}
            for query in QUERIES:
                times = {"ours": [], "upstream": []}
                for _ in range(args.rounds):
                    started = time.perf_counter()
                    n_up = len(server.fuzzy_file_search(query, [root]))
                    times["upstream"].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    n_ours = ours(root, query)
                    times["ours"].append(time.perf_counter() - started)
                if n_up != n_ours:
                    print(f"warning: {query!r}: {n_ours} results ours, {n_up} upstream", file=sys.stderr)
                med = {k: statistics.median(v) * 1000 for k, v in times.items()}
                results[query] = {"ours_ms": round(med["ours"], 1), "upstream_ms": round(med["upstream"], 1),
                                  "ratio": round(med["ours"] / med["upstream"], 2)}
        print(json.dumps({"files": args.files, "rounds": args.rounds, "cpus": os.cpu_count(), "results": results},
                         indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""find_files against the pinned binary's app-server fuzzyFileSearch, side by side in one run.

Both search the same generated tree (``--files`` files in nested directories) for the same
queries. Upstream re-walks the tree on every call. Ours keeps its walk (walk_index, inotify)
and is timed six ways: ``cold`` (the kept walk dropped first: the first search of a tree, walk
+ rank), ``warm`` (the kept walk reused: rank only), ``changed`` (a file created in one
directory just before: the kept walk mended there, then rank), and the same through a real MCP
client session with the server (in memory), ``mcp_cold``, ``mcp`` (warm) and ``mcp_changed``. Then the round trip on a small tree
(20 files): find_files over MCP against fuzzyFileSearch over the app-server's stdio.
Then ``started``: a new ``codespace serve`` process per query and wait, driven over stdio as
the app-server is (JSON lines, a client that only sends and reads), whose first find_files is
timed ``--waits`` seconds after the client's opening (initialize, tools/list; 0: at once): what the warm-up walk (``warm_up``, started with the server) gives the first
search of a server's life, against upstream's per-call time in the same round. The in-process
server above runs with the warm-up off, so that its walk does not overlap the timed searches.
A contender that fails to run fails the benchmark; result counts must agree.
With ``--baseline DIR`` (another copy of the ``codespace_file_search`` package, e.g. an older
commit's from ``git archive``), that copy's in-process ``warm`` and ``changed`` are timed too,
as ``base_warm`` and ``base_changed``, so a change is measured before and after in one run.

Usage: python benchmarks/find_files_bench.py [--files 100000] [--rounds 3] [--calls 200] [--baseline DIR]
       [--waits 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

from baseline import import_copy
from codespace.contract import codex_binary
from codespace.testing import build_app, connect, write_policy_file
from codespace_file_search.pin_client import AppServer
from codespace_file_search.query import parse
from codespace_file_search.ranking import rank
from codespace_file_search.walk import Bounds
from codespace_file_search.walk_index import INDEX
from codespace_file_search.warm_up import SWITCH

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


class StdioServer:
    """``codespace serve`` driven as the app-server is (pin_client.AppServer): JSON lines on its
    stdio, a client doing nothing but sending and reading, so the timed call is the server's."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.notify(method, params, self.next_id)
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"codespace serve ended before answering {method}")
            message = json.loads(line)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise SystemExit(f"{method} failed: {message['error']}")
                return message["result"]

    def notify(self, method: str, params: dict, request_id: int | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request_id is not None:
            message["id"] = request_id
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def started(root: str, base: str, server: AppServer, rounds: int, waits: list[float]) -> dict:
    """The first find_files of a new stdio server, ``wait`` s after its client's opening
    (initialize, initialized, tools/list), per query."""
    codespace = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "codespace")
    policy = write_policy_file(base, LARGE_POLICY, "started-policy.toml")
    env = {k: v for k, v in os.environ.items() if k != SWITCH}
    env["CODESPACE_PLUGINS_ALLOW"] = "file_search"
    kinds = ["upstream", *(f"started_{w:g}s" for w in waits)]
    times: dict[str, dict[str, list[float]]] = {q: {k: [] for k in kinds} for q in QUERIES}
    for n in range(rounds):
        for query in QUERIES:
            t, up = timed(server.fuzzy_file_search, query, [root])
            times[query]["upstream"].append(t)
            for wait in waits:
                state = os.path.join(base, f"started-state-{n}-{wait:g}")
                ours = StdioServer([codespace, "serve", "--workspace", root, "--state-dir", state,
                                    "--policy", str(policy)], env)
                try:
                    ours.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                "clientInfo": {"name": "find_files_bench", "version": "1"}})
                    ours.notify("notifications/initialized", {})
                    ours.request("tools/list", {})
                    time.sleep(wait)
                    t, result = timed(ours.request, "tools/call", {"name": "find_files",
                                                                   "arguments": {"query": query, "limit": 50}})
                finally:
                    ours.close()
                times[query][f"started_{wait:g}s"].append(t)
                shutil.rmtree(state, ignore_errors=True)
                got = len(result["structuredContent"]["files"]) if not result.get("isError") else None
                if got != len(up):
                    raise SystemExit(f"{query!r}: {len(up)} results upstream, {got} from a started server")
    out = {}
    for query, by in times.items():
        med = {k: statistics.median(v) * 1000 for k, v in by.items()}
        out[query] = {f"{k}_ms": round(v, 1) for k, v in med.items()}
        out[query].update({f"{k}_ratio": round(med[k] / med["upstream"], 2) for k in kinds if k != "upstream"})
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
    parser.add_argument("--waits", default="0,1,2", help="seconds after initialize of a started server's first search")
    args = parser.parse_args()
    waits = [float(w) for w in args.waits.split(",") if w.strip()]
    os.environ[SWITCH] = "off"  # the in-process server's; a started server gets the default (on)
    baseline = load_baseline(os.path.abspath(args.baseline)) if args.baseline else None
    base = os.path.realpath(tempfile.mkdtemp(prefix="cs-find-bench-"))
    try:
        root = os.path.join(base, "tree")
        build(root, args.files)
        with AppServer(codex_binary("0.171.0", fetch=False), timeout=600) as server:
            results = anyio.run(large, root, os.path.join(base, "state"), server, args.rounds, baseline)
            latency = anyio.run(small, base, server, args.calls)
            first = started(root, base, server, args.rounds, waits) if waits else {}
        print(json.dumps({"files": args.files, "rounds": args.rounds, "cpus": os.cpu_count(),
                          "large": results, "small_tree_round_trip": latency, "started": first}, indent=2))
    finally:
        INDEX.clear()
        if baseline is not None:
            baseline[0].clear()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

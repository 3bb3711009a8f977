#!/usr/bin/env python3
"""codespace-fs side by side, in one run (see benchmarks/README-fs.md).

1. walk of a 100,000-file tree: the backend vs ``find`` vs ``os.walk``;
2. read_file of 10,000 small files through the backend vs ``open().read()``;
3. per-call MCP latency vs the reference MCP filesystem server (Node):
   read_file vs read_text_file, walk vs directory_tree, list_dir vs list_directory.

The machine is shared and noisy: every comparison is interleaved (A, B, A, B...)
over several rounds and reported as the median of the rounds.

    python benchmarks/fs_bench.py [--rounds 5] [--files 100000] [--small 10000] [--json out.json]

Needs a Python environment holding codespace and codespace-fs (and mcp), ``find``,
and for part 3 ``node`` with @modelcontextprotocol/server-filesystem (--ref).
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
from pathlib import Path

from functools import partial

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).parent))

from fs_mcp_latency import measure  # noqa: E402

from codespace.contract import ReadFileRequest, WalkRequest  # noqa: E402
from codespace.workspace import Workspace  # noqa: E402
from codespace_fs import reading, walking  # noqa: E402
from codespace_fs.backend import FsBackend  # noqa: E402
from codespace_fs.plugin import _mode  # noqa: E402

DEFAULT_REF = str(Path.home() / ".cache/codespace/refserver/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
BIG_LIMITS = """
[limits]
walk_max_entries = 1000000
walk_max_dirs = 100000
walk_max_response_bytes = 1073741824
"""


def build_tree(root: Path, files: int) -> int:
    """10 x 10 x 10 directories holding files/1000 files each."""
    per = max(1, files // 1000)
    count = 0
    for a in range(10):
        for b in range(10):
            for c in range(10):
                d = root / f"d{a}" / f"e{b}" / f"f{c}"
                d.mkdir(parents=True, exist_ok=True)
                for k in range(per):
                    (d / f"file{k:03d}.txt").write_bytes(b"x")
                    count += 1
    return count


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def timed(fn) -> float:  # noqa: ANN001
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_walk(tree: Path, ws_state: Path, rounds: int) -> dict:
    policy = ws_state / "policy.toml"
    policy.write_text(BIG_LIMITS)
    backend = FsBackend(Workspace.open(tree, policy_path=policy, state_dir=ws_state / "state"), _mode(None)[0])

    def find() -> None:
        subprocess.run(["find", str(tree)], stdout=subprocess.DEVNULL, check=True)

    def find_sizes() -> None:
        subprocess.run(["find", str(tree), "-printf", "%p %y %s\n"], stdout=subprocess.DEVNULL, check=True)

    def py_walk() -> None:
        out = []
        for dirpath, dirnames, filenames in os.walk(tree):
            out.extend(os.path.join(dirpath, n) for n in dirnames + filenames)

    results: dict = {}

    def backend_walk(sizes: bool):  # noqa: ANN202
        async def go() -> None:
            # Keep the result out of anyio.run's return value: asyncio computes the
            # main task's repr, and a 100,000-entry model's repr costs seconds.
            result = await backend.walk(WalkRequest(path=str(tree), sizes=sizes))
            results["entries"] = len(result.entries)
            results["truncated"] = result.truncated

        return lambda: anyio.run(go)

    def engine() -> None:
        # The traversal alone (plain dicts), without the contract's pydantic WalkResult.
        collected = walking.collect(backend.conf, WalkRequest(path=str(tree)), backend.limits)
        results["engine_entries"] = len(collected["entries"])

    runs: dict[str, list[float]] = {k: [] for k in ("find", "find_printf_type_size", "os_walk", "backend_walk",
                                                     "backend_walk_engine", "backend_walk_sizes")}
    for _ in range(rounds):
        runs["find"].append(timed(find))
        runs["os_walk"].append(timed(py_walk))
        runs["backend_walk"].append(timed(backend_walk(False)))
        runs["backend_walk_engine"].append(timed(engine))
        runs["find_printf_type_size"].append(timed(find_sizes))
        runs["backend_walk_sizes"].append(timed(backend_walk(True)))
    med = {k: round(median(v) * 1000, 1) for k, v in runs.items()}
    return {
        "entries": results["entries"], "truncated": results["truncated"], "median_ms": med,
        "ratio_backend_vs_find": round(med["backend_walk"] / med["find"], 2),
        "ratio_backend_engine_vs_find": round(med["backend_walk_engine"] / med["find"], 2),
        "ratio_backend_engine_vs_os_walk": round(med["backend_walk_engine"] / med["os_walk"], 2),
        "ratio_backend_vs_os_walk": round(med["backend_walk"] / med["os_walk"], 2),
        "ratio_backend_sizes_vs_find_printf": round(med["backend_walk_sizes"] / med["find_printf_type_size"], 2),
        "rounds_ms": {k: [round(x * 1000, 1) for x in v] for k, v in runs.items()},
    }


def bench_reads(root: Path, state: Path, count: int, rounds: int) -> dict:
    small = root / "small"
    small.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        p = small / f"f{i:05d}.txt"
        p.write_text("".join(f"line {j} of file {i}\n" for j in range(40)))  # ~1 KiB
        names.append(str(p))
    backend = FsBackend(Workspace.open(root, state_dir=state), _mode(None)[0])

    def plain() -> None:
        for n in names:
            with open(n, encoding="utf-8") as f:
                f.read()

    def via_backend() -> None:
        async def go() -> None:
            for n in names:
                await backend.read_file(ReadFileRequest(path=n))

        anyio.run(go)

    def via_read_bytes() -> None:
        async def go() -> None:
            for n in names:
                await backend.read_bytes(n, max_bytes=1 << 20)

        anyio.run(go)

    def via_thread() -> None:
        # The same work as backend_read_file, but hopping to a worker thread per call:
        # what running small reads inline saves.
        limits = backend.limits

        async def go() -> None:
            for n in names:
                await anyio.to_thread.run_sync(partial(
                    reading.read_file, backend.conf, ReadFileRequest(path=n), max_file_bytes=limits.max_file_bytes,
                    default_max_bytes=limits.max_read_bytes,
                ))

        anyio.run(go)

    runs: dict[str, list[float]] = {"open_read": [], "backend_read_file": [], "backend_read_bytes": [],
                                    "read_file_via_worker_thread": []}
    via_backend()
    for _ in range(rounds):
        runs["open_read"].append(timed(plain))
        runs["backend_read_file"].append(timed(via_backend))
        runs["backend_read_bytes"].append(timed(via_read_bytes))
        runs["read_file_via_worker_thread"].append(timed(via_thread))
    per_call_us = {k: round(median(v) / count * 1e6, 2) for k, v in runs.items()}
    return {
        "files": count, "per_call_us": per_call_us,
        "ratio_read_file_vs_open_read": round(per_call_us["backend_read_file"] / per_call_us["open_read"], 2),
        "ratio_read_bytes_vs_open_read": round(per_call_us["backend_read_bytes"] / per_call_us["open_read"], 2),
    }


def bench_mcp(root: Path, state: Path, ref: str, rounds: int, calls: int) -> dict:
    ws = root / "mcpws"
    (ws / "tree").mkdir(parents=True, exist_ok=True)
    for i in range(10):
        d = ws / "tree" / f"dir{i}"
        d.mkdir(exist_ok=True)
        for j in range(30):
            (d / f"file{j}.txt").write_text("x\n")
    (ws / "a.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    ours = [sys.executable, "-m", "codespace", "serve", "--workspace", str(ws), "--state-dir", str(state / "mcp")]
    env = dict(os.environ, CODESPACE_PLUGINS_ALLOW="fs")
    theirs = ["node", ref, str(ws)]
    pairs = {
        "read": (("read_file", {"path": "a.txt"}), ("read_text_file", {"path": str(ws / "a.txt")})),
        "tree_310": (("walk", {"path": "tree"}), ("directory_tree", {"path": str(ws / "tree")})),
        "list_dir": (("list_dir", {"path": "tree/dir0"}), ("list_directory", {"path": str(ws / "tree" / "dir0")})),
    }
    out: dict = {}
    for label, ((our_tool, our_args), (ref_tool, ref_args)) in pairs.items():
        p50: dict[str, list[float]] = {"codespace": [], "reference": [], "codespace_no_client_validation": []}
        p90: dict[str, list[float]] = {k: [] for k in p50}
        for _ in range(rounds):
            for key, argv, tool, args, env_, validate in (
                ("codespace", ours, our_tool, our_args, env, True),
                ("reference", theirs, ref_tool, ref_args, None, True),
                ("codespace_no_client_validation", ours, our_tool, our_args, env, False),
            ):
                r = anyio.run(measure, argv, tool, args, calls, 30, env_, validate)
                p50[key].append(r["p50_ms"])
                p90[key].append(r["p90_ms"])
        out[label] = {
            "codespace": f"{our_tool} {json.dumps(our_args)}", "reference": f"{ref_tool} {json.dumps(ref_args)}",
            **{f"{k}_p50_ms": round(median(v), 3) for k, v in p50.items()},
            **{f"{k}_p90_ms": round(median(v), 3) for k, v in p90.items()},
            "ratio_p50": round(median(p50["codespace"]) / median(p50["reference"]), 2),
            "ratio_p50_no_client_validation": round(
                median(p50["codespace_no_client_validation"]) / median(p50["reference"]), 2),
            "rounds_p50_ms": p50,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--mcp-calls", type=int, default=300)
    ap.add_argument("--ref", default=os.environ.get("FS_BENCH_REF", DEFAULT_REF))
    ap.add_argument("--skip", action="append", default=[], choices=["walk", "reads", "mcp"])
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--keep", default=None, help="build the trees here and keep them")
    a = ap.parse_args()
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="fs-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    report: dict = {"resolution": _mode(None), "python": sys.version.split()[0], "rounds": a.rounds}
    try:
        if "walk" not in a.skip:
            tree = base / "tree"
            if not tree.exists():
                build_tree(tree, a.files)
            subprocess.run(["find", str(tree)], stdout=subprocess.DEVNULL, check=True)  # warm the dentry cache
            report["walk"] = bench_walk(tree, base, a.rounds)
            shown = {k: v for k, v in report["walk"].items() if k != "rounds_ms"}
            print(json.dumps({"walk": shown}, indent=1), flush=True)
        if "reads" not in a.skip:
            report["reads"] = bench_reads(base / "readws", base / "readstate", a.small, a.rounds)
            print(json.dumps({"reads": report["reads"]}, indent=1), flush=True)
        if "mcp" not in a.skip:
            if not Path(a.ref).exists() or shutil.which("node") is None:
                report["mcp"] = {"skipped": f"reference server not found at {a.ref} or no node"}
            else:
                report["mcp"] = bench_mcp(base, base / "mcpstate", a.ref, a.rounds, a.mcp_calls)
            print(json.dumps({"mcp": report["mcp"]}, indent=1), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

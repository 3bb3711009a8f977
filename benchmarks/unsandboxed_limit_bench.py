"""What the process limit of unsandboxed commands costs an ``exec``, side by side in one run:
two in-process servers with the sandbox off, one with ``[sandbox] max_processes = 4096`` (each
command's cgroup gets a mirror in the cgroup v1 pids hierarchy, pids.max set, joined by the
stub) and one with ``max_processes = 0`` (no mirror), calls interleaved.

    python benchmarks/unsandboxed_limit_bench.py [--calls 200] [--rounds 3]   # as root, hybrid cgroups

A contender that cannot run as described (no pids hierarchy here, so no limit to time) fails
the benchmark instead of being timed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from codespace.testing import build_app, call_ok, connect

POLICY = '[sandbox]\nmode = "off"\nmax_processes = {}\n'


async def _round(base: Path, calls: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"limited": [], "no limit": []}
    apps = {}
    for name, limit in (("limited", 4096), ("no limit", 0)):
        (base / name).mkdir()
        apps[name] = build_app(base / name, state_dir=base / f"{name}-state", policy=POLICY.format(limit), plugins=())
    async with connect(apps["limited"]) as limited, connect(apps["no limit"]) as unlimited:
        tracking = (await call_ok(limited, "workspace_info"))["sandbox"]["process_tracking"]
        if "pids.max" not in (tracking["unsandboxed_process_limit"] or ""):
            raise SystemExit(f"unsandboxed_limit_bench: no limit is set here: {tracking['unsandboxed_process_limit']}")
        clients = {"limited": limited, "no limit": unlimited}
        for _ in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                await call_ok(client, "exec", {"command": ["true"]})
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for number in range(1, args.rounds + 1):
        base = Path(tempfile.mkdtemp(prefix="limit-bench-"))
        try:
            got = anyio.run(_round, base, args.calls)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(f"round {number}: exec ['true'] p50 limited {got['limited']:.3f} ms, no limit {got['no limit']:.3f} ms: "
              f"{got['limited'] / got['no limit']:.3f}x (+{got['limited'] - got['no limit']:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

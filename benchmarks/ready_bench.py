#!/usr/bin/env python3
"""Server-ready time over stdio, CodeSpace against the reference filesystem server, side by side.

"Ready" is what an agent's client waits for before its first model request: from spawn
to the answers of ``initialize`` and ``tools/list`` (after ``notifications/initialized``),
read off raw pipes (no client library in the measurement). Contenders are interleaved
round by round; medians are reported with the ratio against the reference server.

- ``codespace``: ``codespace serve`` as agents start it (every installed plugin), with the
  tool listing kept from an earlier start (the state every start after the first is in);
- ``codespace-cold``: the same with ``CODESPACE_LISTING_CACHE=0`` (the listing built at
  start: the first start after an install or a policy change), for information;
- ``codespace-policy-edited``: ``codespace serve`` on a workspace whose policy file is
  rewritten before every start (a new comment line: other bytes, the same plugins), so the
  listing kept under the policy's bytes never matches and the start finds the one kept under
  its ``[plugins]`` table: a start after an edit of the policy outside ``[plugins]``;
- ``codespace-sdk``: the same with ``CODESPACE_DIRECT_CALLS=0`` too (every request through the
  SDK's server: how a first start answered ``tools/list`` before 2026-12-02), for information;
- ``reference``: ``@modelcontextprotocol/server-filesystem`` under node.

A contender that fails to start or answers wrongly fails the benchmark (exit 1); it is
never timed. Usage:

    python benchmarks/ready_bench.py [--rounds 15] [--ref PATH/dist/index.js]
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

DEFAULT_REF = os.environ.get(
    "CODESPACE_REFERENCE_FS",
    str(Path.home() / ".cache/codespace/refserver/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
)
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ready-bench", "version": "0"}}}


class ContenderFailed(Exception):
    pass


def ready_ms(name: str, cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        first = proc.stdout.readline()
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                         b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')
        proc.stdin.flush()
        second = proc.stdout.readline()
        took = (time.perf_counter() - start) * 1000
        try:
            init, listing = json.loads(first), json.loads(second)
            ok = init["id"] == 1 and "protocolVersion" in init["result"] and listing["id"] == 2 \
                and listing["result"]["tools"]
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            proc.kill()
            raise ContenderFailed(f"{name} did not answer initialize and tools/list: {first[:200]!r} "
                                  f"{second[:200]!r}; stderr: {proc.stderr.read()[-500:]!r}")
        return took
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ref", default=DEFAULT_REF, help="the reference server's dist/index.js")
    args = parser.parse_args()
    if not Path(args.ref).is_file():
        print(f"FAILED: the reference server is not at {args.ref} (npm install "
              "@modelcontextprotocol/server-filesystem, then --ref)", file=sys.stderr)
        return 1
    ws = os.path.realpath(tempfile.mkdtemp(prefix="cs-ready-ws-"))
    state = tempfile.mkdtemp(prefix="cs-ready-state-")
    xdg = tempfile.mkdtemp(prefix="cs-ready-xdg-")  # a listing cache of this run's own
    Path(ws, "a.txt").write_text("hello\n")
    base = {**os.environ, "XDG_STATE_HOME": xdg}
    serve = [sys.executable, "-m", "codespace", "serve", "--workspace", ws, "--state-dir", state]
    edited_ws = os.path.realpath(tempfile.mkdtemp(prefix="cs-ready-edited-"))
    policy = Path(edited_ws, ".codespace", "policy.toml")
    policy.parent.mkdir()
    edits = iter(range(1, 1_000_000))

    def edit_policy() -> None:
        policy.write_text(f"# edit {next(edits)}\n[limits]\nmax_read_bytes = 65536\n")

    edit_policy()
    edited = [sys.executable, "-m", "codespace", "serve", "--workspace", edited_ws, "--state-dir", state + "-edited"]
    before = {"codespace-policy-edited": edit_policy}
    contenders = {
        "codespace": (serve, base),
        "codespace-policy-edited": (edited, base),
        "codespace-cold": (serve, {**base, "CODESPACE_LISTING_CACHE": "0"}),
        # Every request through the SDK's server: the road a first start's tools/list took before
        # the front built the listing itself (2026-12-02).
        "codespace-sdk": (serve, {**base, "CODESPACE_LISTING_CACHE": "0", "CODESPACE_DIRECT_CALLS": "0"}),
        "reference": ([shutil.which("node") or "node", args.ref, ws], base),
    }
    try:
        ready_ms("warm-up", serve, base)  # the first start keeps the listing, as any first start does
        ready_ms("warm-up", edited, base)
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, (cmd, env) in contenders.items():
                before.get(name, lambda: None)()
                times[name].append(ready_ms(name, cmd, env))
    except ContenderFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for path in (ws, state, xdg, edited_ws, state + "-edited"):
            shutil.rmtree(path, ignore_errors=True)
    medians = {name: round(statistics.median(values), 1) for name, values in times.items()}
    report = {
        "median_ready_ms": medians,
        "min_ready_ms": {name: round(min(values), 1) for name, values in times.items()},
        "ratio_codespace_vs_reference": round(medians["codespace"] / medians["reference"], 3),
        "ratio_codespace_policy_edited_vs_reference":
            round(medians["codespace-policy-edited"] / medians["reference"], 3),
        "ratio_codespace_cold_vs_reference": round(medians["codespace-cold"] / medians["reference"], 3),
        "ratio_codespace_sdk_vs_reference": round(medians["codespace-sdk"] / medians["reference"], 3),
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

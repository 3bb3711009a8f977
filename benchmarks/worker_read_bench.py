"""read_file through the runtime worker against in-process, driven by three MCP clients.

One real ``codespace serve`` over stdio per contender, client and round:
- ``in-process``: ``[runtime] worker = "off"``;
- ``child``: ``[runtime] worker = "child"``, the policy's default ``lane_spin_us``;
- ``child, no spin``: the same with ``lane_spin_us = 0`` (each end of the fast lane sleeps at once).

Clients, each timing ``read_file`` of a 96-byte file (p50 of ``--calls`` sequential calls after 20
untimed ones, the server settled for a second after its worker serves):
- ``python``: the MCP Python SDK's ``Client`` (what custom agent loops use);
- ``typescript``: ``@modelcontextprotocol/sdk`` 1.x under node (``ts_read_file.cjs``; the Inspector
  and Claude Code are built on it), from ``--node-modules`` or ``$CODESPACE_NODE_MODULES``;
- ``raw``: newline-delimited JSON written and read by this process, no SDK (a client as light as
  Codex's).

Contenders and their order rotate round by round; medians of per-round p50s are reported with
each child's ratio to in-process. ``--gap-ms`` spaces the calls (isolated reads instead of a
burst). A contender that fails to start or answers wrongly fails the run (exit 1).

    .venv/bin/python benchmarks/worker_read_bench.py [--clients python,typescript,raw] [--rounds 5] [--calls 300] [--gap-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
READ_TEXT = "hello from a small file\n" * 4
CONTENDERS = {"in-process": "off", "child": "child", "child, no spin": "child"}
POLICIES = {
    "in-process": '[runtime]\nworker = "off"\n',
    "child": '[runtime]\nworker = "child"\n',
    "child, no spin": '[runtime]\nworker = "child"\nlane_spin_us = 0\n',
}
SETTLE_S = 1.0
WARM_UP = 20


class Failed(Exception):
    pass


def _server_argv(root: Path, contender: str, n: int) -> list[str]:
    state = root / f"state-{n}"
    policy = root / f"policy-{n}.toml"
    policy.write_text(POLICIES[contender])
    return [sys.executable, "-m", "codespace", "serve", "--workspace", str(root / "ws"),
            "--state-dir", str(state), "--policy", str(policy)]


def _env() -> dict[str, str]:
    return {**os.environ, "CODESPACE_PLUGINS_ALLOW": "fs,runtime,pty,linux_sandbox"}


def _median_of(samples: list[float]) -> float:
    if not samples:
        raise Failed("no call was timed")
    return statistics.median(samples)


async def _python_p50(argv: list[str], worker: str, calls: int, gap_s: float) -> float:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=_env())) as client:
        for _ in range(100):
            runtime = (await client.call_tool("workspace_info", {})).structured_content["runtime"]
            if runtime["worker"] != worker:
                raise Failed(f"the server reports worker={runtime['worker']}, not {worker}")
            if worker == "off" or runtime["serving"]:
                break
            await asyncio.sleep(0.1)
        else:
            raise Failed(f"the {worker} worker never served")
        await asyncio.sleep(SETTLE_S)
        samples = []
        for i in range(WARM_UP + calls):
            start = time.perf_counter()
            result = await client.call_tool("read_file", {"path": "a.txt"})
            elapsed = (time.perf_counter() - start) * 1000
            if result.is_error or result.structured_content["content"] != READ_TEXT:
                raise Failed(f"read_file failed: {result.content[0].text[:300]}")
            if i >= WARM_UP:
                samples.append(elapsed)
            if gap_s:
                await asyncio.sleep(gap_s)
    return _median_of(samples)


def _raw_p50(argv: list[str], worker: str, calls: int, gap_s: float) -> float:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=_env())
    ids = iter(range(1, 1 << 30))

    def call(method: str, params: dict) -> dict:
        request_id = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                                     "params": params}).encode() + b"\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise Failed(f"the server closed its output (exit {proc.poll()})")
        answer = json.loads(line)
        if answer.get("id") != request_id or "result" not in answer:
            raise Failed(f"{method} answered {line[:300]!r}")
        return answer["result"]

    try:
        call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "worker_read_bench", "version": "1"}})
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for _ in range(100):
            runtime = call("tools/call", {"name": "workspace_info", "arguments": {}})["structuredContent"]["runtime"]
            if runtime["worker"] != worker:
                raise Failed(f"the server reports worker={runtime['worker']}, not {worker}")
            if worker == "off" or runtime["serving"]:
                break
            time.sleep(0.1)
        else:
            raise Failed(f"the {worker} worker never served")
        time.sleep(SETTLE_S)
        samples = []
        read = {"name": "read_file", "arguments": {"path": "a.txt"}}
        for i in range(WARM_UP + calls):
            start = time.perf_counter()
            result = call("tools/call", read)
            elapsed = (time.perf_counter() - start) * 1000
            if result.get("isError") or result["structuredContent"]["content"] != READ_TEXT:
                raise Failed(f"read_file failed: {json.dumps(result)[:300]}")
            if i >= WARM_UP:
                samples.append(elapsed)
            if gap_s:
                time.sleep(gap_s)
        return _median_of(samples)
    finally:
        proc.stdin.close()
        proc.wait(30)


def _typescript_p50(argv: list[str], worker: str, calls: int, gap_s: float, node_modules: str) -> float:
    done = subprocess.run(["node", str(HERE / "ts_read_file.cjs"), node_modules, json.dumps(argv), str(calls),
                           str(gap_s * 1000), worker, READ_TEXT], capture_output=True, text=True, env=_env(),
                          timeout=600)
    if done.returncode != 0:
        raise Failed(done.stderr.strip()[-600:] or f"node exited {done.returncode}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["p50_ms"])


def run(clients: list[str], rounds: int, calls: int, gap_s: float, node_modules: str | None) -> dict:
    names = list(CONTENDERS)
    p50s = {client: {name: [] for name in names} for client in clients}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text(READ_TEXT)
        n = 0
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for client in clients:
                for name in order:
                    n += 1
                    argv, worker = _server_argv(root, name, n), CONTENDERS[name]
                    try:
                        if client == "python":
                            p50 = asyncio.run(_python_p50(argv, worker, calls, gap_s))
                        elif client == "raw":
                            p50 = _raw_p50(argv, worker, calls, gap_s)
                        else:
                            p50 = _typescript_p50(argv, worker, calls, gap_s, node_modules or "")
                    except Failed as exc:
                        raise SystemExit(f"{client} client, {name}: {exc}: benchmark failed") from None
                    p50s[client][name].append(p50)
    return {client: {name: {"p50_ms": round(statistics.median(v), 4), "rounds": [round(x, 4) for x in v]}
                     for name, v in by.items()} for client, by in p50s.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="python,typescript,raw")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=0.0, help="pause between calls (0: back to back)")
    parser.add_argument("--node-modules", default=os.environ.get("CODESPACE_NODE_MODULES"),
                        help="directory holding @modelcontextprotocol/sdk 1.x (for the typescript client)")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - {"python", "typescript", "raw"}
    if unknown:
        parser.error(f"unknown clients: {', '.join(sorted(unknown))}")
    if "typescript" in clients and not (args.node_modules and
                                        Path(args.node_modules, "@modelcontextprotocol", "sdk").is_dir()):
        raise SystemExit("the typescript client needs --node-modules (or CODESPACE_NODE_MODULES) holding "
                         "@modelcontextprotocol/sdk 1.x: benchmark failed")
    found = run(clients, args.rounds, args.calls, args.gap_ms / 1000, args.node_modules)
    for client, by in found.items():
        base = by["in-process"]["p50_ms"]
        print(f"{client:>10}: " + "  ".join(
            f"{name} {v['p50_ms']:.3f} ms" + ("" if name == "in-process" else f" ({v['p50_ms'] / base:.2f}x)")
            for name, v in by.items()))
    print(json.dumps({"calls": args.calls, "rounds": args.rounds, "gap_ms": args.gap_ms, "p50": found,
                      "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

"""Per-call latency of one MCP tool call against a stdio MCP server (adapted from
shared/bench/mcp_bench.py (beside the checkout) for benchmarks/fs_bench.py).

    python benchmarks/fs_mcp_latency.py --cmd 'node index.js /ws' --tool read_text_file --args '{"path": "/ws/a"}'
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

import anyio
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters

from harness import call_latencies, pct


async def _no_validation(self, name, result) -> None:  # noqa: ANN001
    return None


async def measure(
    argv: list[str], tool: str, args: dict, n: int, warmup: int, env: dict | None = None, validate: bool = True
) -> dict:
    """p50/p90/p99 of ``n`` sequential calls. ``validate=False`` switches off the Python
    client's jsonschema check of structured output against the tool's outputSchema
    (a client-side cost that grows with the result; servers without outputSchema never pay it)."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    original = ClientSession.validate_tool_result
    if not validate:
        ClientSession.validate_tool_result = _no_validation  # type: ignore[method-assign]
    try:
        return await _measure(params, tool, args, n, warmup)
    finally:
        ClientSession.validate_tool_result = original  # type: ignore[method-assign]


async def _measure(params: StdioServerParameters, tool: str, args: dict, n: int, warmup: int) -> dict:
    t0 = time.perf_counter()
    async with Client(params) as client:
        startup = time.perf_counter() - t0
        names = [t.name for t in (await client.list_tools()).tools]
        if tool not in names:
            raise SystemExit(f"tool {tool!r} not in {names}")
        lat = await call_latencies(client, tool, args, n, warmup)
    return {
        "startup_ms": round(startup * 1000, 1),
        "p50_ms": round(pct(lat, 50), 3), "p90_ms": round(pct(lat, 90), 3), "p99_ms": round(pct(lat, 99), 3),
        "mean_ms": round(statistics.mean(lat), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--args", default="{}")
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--no-output-validation", action="store_true", help="skip the client's outputSchema check")
    a = ap.parse_args()
    out = anyio.run(measure, shlex.split(a.cmd), a.tool, json.loads(a.args), a.n, a.warmup, None,
                    not a.no_output_validation)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

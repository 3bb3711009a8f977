"""Side-by-side MCP measurements with one Python MCP client (adapted from the shared mcp_bench.py).

Every contender runs in the same process, interleaved round by round, so machine
noise hits them alike; medians over rounds are reported with ratios.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parent.parent
REFERENCE_FS = Path(os.environ.get(
    "CODESPACE_REFERENCE_FS",
    str(Path.home() / ".cache/codespace/refserver/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
))
DESKTOP_COMMANDER = Path(os.environ.get(
    "CODESPACE_DESKTOP_COMMANDER",
    str(Path.home() / ".cache/codespace/dc/node_modules/@wonderwhy-er/desktop-commander/dist/index.js"),
))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def real_python() -> str:
    """This interpreter (a venv's python, not a version-manager shim, which adds ~50 ms per start)."""
    return sys.executable


@dataclass
class Contender:
    name: str
    params: StdioServerParameters
    tool: str
    args: dict[str, Any]
    mode: str = "auto"
    check: Callable[[Any], None] | None = None


@dataclass
class Stats:
    startup_ms: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {k: round(statistics.median(v), 3) for k, v in vars(self).items() if v}


async def call_latencies(client: Client, tool: str, args: dict, n: int, warmup: int, *, name: str = "",
                         check: Callable[[Any], bool] | None = None) -> list[float]:
    """Milliseconds of ``n`` sequential calls after ``warmup`` calls (which must succeed)."""
    for _ in range(warmup):
        result = await client.call_tool(tool, args)
        if getattr(result, "is_error", False) or (check and check(result)):
            raise SystemExit(f"{name or tool}: {tool} failed: {result.content[0].text[:300]}")
    latencies = []
    for _ in range(n):
        t0 = time.perf_counter()
        await client.call_tool(tool, args)
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


async def measure(contender: Contender, n: int, warmup: int, stats: Stats) -> None:
    start = time.perf_counter()
    async with Client(contender.params, mode=contender.mode) as client:
        stats.startup_ms.append((time.perf_counter() - start) * 1000)
        if n == 0:
            return
        await client.list_tools()
        latencies = await call_latencies(client, contender.tool, contender.args, n, warmup, name=contender.name,
                                         check=contender.check)
        stats.p50_ms.append(pct(latencies, 50))
        stats.p99_ms.append(pct(latencies, 99))


async def rounds(contenders: list[Contender], *, rounds: int, n: int, warmup: int,
                 progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> dict[str, dict[str, float]]:
    results = {c.name: Stats() for c in contenders}
    for r in range(rounds):
        for contender in contenders:
            await measure(contender, n, warmup, results[contender.name])
        progress(f"round {r + 1}/{rounds} done")
    return {name: stats.summary() for name, stats in results.items()}


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out

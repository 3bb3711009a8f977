"""End to end: ``exec ["true"]`` through a real in-process MCP session, unsandboxed and under
each engine, interleaved call by call.

    python benchmarks/sandbox_exec_bench.py [--calls 40]

What an agent sees: the MCP round trip, the gateway, ``wrap`` (handshake + cached seccomp
program), the spawn (through ``setpriv`` when installed), the helper and the sandbox.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from codespace.testing import build_app, call_ok, connect

READ_ONLY = '[filesystem.paths]\n"." = "read"\n'
POLICIES = {
    "unsandboxed": '[sandbox]\nmode = "off"\n',
    "bubblewrap-ro": READ_ONLY + '[sandbox]\nengine = "bubblewrap"\n',
    "bubblewrap": '[sandbox]\nengine = "bubblewrap"\n',
    "landlock": '[sandbox]\nengine = "landlock"\n',
}


async def main(calls: int) -> dict[str, float]:
    base = Path(tempfile.mkdtemp(prefix="sandbox-exec-bench-", dir="/var/tmp"))
    samples: dict[str, list[float]] = {name: [] for name in POLICIES}
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for name, policy in POLICIES.items():
            ws = base / name
            (ws / "sub").mkdir(parents=True)
            app = build_app(ws, state_dir=base / f"{name}-state", policy=policy, plugins=("linux_sandbox",))
            clients[name] = await stack.enter_async_context(connect(app))
        for name, client in clients.items():  # warm-up
            out = await call_ok(client, "exec", {"command": ["true"]})
            assert out["sandboxed"] == (name != "unsandboxed"), out
        for _ in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                await call_ok(client, "exec", {"command": ["true"]})
                samples[name].append((time.perf_counter() - start) * 1000)
    shutil.rmtree(base, ignore_errors=True)
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    print(json.dumps({"calls": args.calls, "median_ms": anyio.run(main, args.calls)}))

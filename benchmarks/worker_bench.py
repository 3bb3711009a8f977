"""The worker (codespace-runtime) side by side with floors, in one run.

Section ``protocol``: a round trip of protocol 5 between two processes on a socket pair.
Contenders, each its own process, all driven from this one with the same asyncio framing:
- ``floor-bytes``: a blocking loop that reads a frame and answers a fixed small frame, no JSON:
  what two Python processes exchanging frames cost at least;
- ``floor-json``: the same, decoding the request and encoding the answer as JSON;
- ``floor-asyncio``: an asyncio loop answering with this package's framing (``recv_frame`` /
  ``send_frame``) and nothing else: the worker's transport without its protocol;
- ``worker``: ``codespace-worker serve --fd N --no-runner`` (hardened, handshake done) answering
  ``ping`` through :class:`WorkerClient`.
Workloads: ``ping`` (an empty request) and ``1MiB`` (a request carrying 1 MiB of string
params, a small answer). Rounds interleave the contenders so machine noise hits them alike;
medians of per-round p50s are reported, with the worker's ratio to each floor.

A contender that fails to start or answer fails the benchmark (exit 1), nothing is reported.

    .venv/bin/python benchmarks/worker_bench.py --section protocol [--rounds 5] [--calls 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codespace_runtime.client import WorkerClient
from codespace_runtime.framing import recv_frame, send_frame

MIB = 1024 * 1024

FLOOR = r"""
import json, socket, struct, sys
sock = socket.socket(fileno=int(sys.argv[1]))
decode = sys.argv[2] == "json"
answer = json.dumps({"id": 0, "result": {"pong": True}}).encode()
answer = struct.pack(">I", len(answer)) + answer
while True:
    header = sock.recv(4, socket.MSG_WAITALL)
    if len(header) < 4:
        break
    body = sock.recv(struct.unpack(">I", header)[0], socket.MSG_WAITALL)
    if decode:
        request = json.loads(body.decode())
        out = json.dumps({"id": request["id"], "result": {"pong": True}}).encode()
        sock.sendall(struct.pack(">I", len(out)) + out)
    else:
        sock.sendall(answer)
"""


FRAMING = r"""
import asyncio, socket, sys
from codespace_runtime.framing import recv_frame, send_frame
async def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(False)
    while True:
        try:
            request, _ = await recv_frame(sock)
        except EOFError:
            return
        await send_frame(sock, {"id": request["id"], "result": {"pong": True}})
asyncio.run(main())
"""


class Floor:
    def __init__(self, kind: str) -> None:
        self.name = f"floor-{kind}"
        ours, theirs = socket.socketpair()
        script, flags = (FRAMING, []) if kind == "asyncio" else (FLOOR, ["-I"])
        self.proc = subprocess.Popen([sys.executable, *flags, "-c", script, str(theirs.fileno()), kind],
                                     pass_fds=[theirs.fileno()])
        theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self._id = 0

    async def call(self, params: dict) -> dict:
        self._id += 1
        await send_frame(self.sock, {"id": self._id, "method": "ping", "params": params})
        obj, _ = await recv_frame(self.sock)
        return obj["result"]

    async def close(self) -> None:
        self.sock.close()
        self.proc.wait(10)


class Worker:
    name = "worker"

    def __init__(self, tmp: Path) -> None:
        self.token = secrets.token_hex(32).encode()
        token_file = tmp / "token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, self.token)
        os.close(fd)
        (tmp / "ws").mkdir()
        ours, theirs = socket.socketpair()
        argv = [sys.executable, "-m", "codespace_runtime.cli", "serve", "--workspace", str(tmp / "ws"),
                "--token-file", str(token_file), "--no-runner", "--fd", str(theirs.fileno())]
        self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()],
                                     env={**os.environ, "CODESPACE_STATE_DIR": str(tmp / "state")})
        theirs.close()
        self.sock = ours
        self.client: WorkerClient | None = None

    async def start(self) -> None:
        self.client = await asyncio.wait_for(WorkerClient.connect(self.sock, self.token, "worker_bench"), 30)

    async def call(self, params: dict) -> dict:
        result, _ = await self.client.call("ping", params)
        return result

    async def close(self) -> None:
        await self.client.close()
        self.proc.wait(10)


async def p50_ms(contender, params: dict, calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        result = await contender.call(params)
        samples.append((time.perf_counter() - start) * 1000)
        if result != {"pong": True}:
            raise SystemExit(f"{contender.name} answered {result!r}, not a pong: benchmark failed")
    return statistics.median(samples)


async def protocol(rounds: int, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        worker = Worker(Path(tmp))
        contenders = [Floor("bytes"), Floor("json"), Floor("asyncio"), worker]
        try:
            await worker.start()
        except Exception as exc:
            raise SystemExit(f"worker failed to start ({type(exc).__name__}: {exc}): benchmark failed") from None
        workloads = {"ping": ({}, calls), "1MiB": ({"pad": "x" * (MIB - 64)}, max(10, calls // 20))}
        results: dict = {w: {c.name: [] for c in contenders} for w in workloads}
        try:
            for contender in contenders:  # warm-up
                for params, _ in workloads.values():
                    await p50_ms(contender, params, 3)
            for _ in range(rounds):
                for workload, (params, n) in workloads.items():
                    for contender in contenders:
                        results[workload][contender.name].append(await p50_ms(contender, params, n))
        finally:
            for contender in contenders:
                await contender.close()
    return {w: {name: round(statistics.median(v), 4) for name, v in by.items()} for w, by in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", choices=["protocol"], default="protocol")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    results = asyncio.run(protocol(args.rounds, args.calls))
    for workload, by in results.items():
        worker = by["worker"]
        print(f"{workload:>5}: " + "  ".join(f"{name} {ms:.3f} ms" for name, ms in by.items())
              + "  | " + ", ".join(f"worker/{name} {worker / ms:.2f}x" for name, ms in by.items() if name != "worker"))
    print(json.dumps({"section": args.section, "p50_ms": results, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

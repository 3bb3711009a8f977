"""The worker (codespace-runtime) side by side with floors, in one run.

Section ``protocol``: a round trip of protocol 5 between two processes on a socket pair.
Contenders, each its own process, all driven from this one with the same asyncio framing:
- ``floor-bytes``: a blocking loop that reads a frame and answers a fixed small frame, no JSON:
  what two Python processes exchanging frames cost at least;
- ``floor-json``: the same, decoding the request and encoding the answer as JSON;
- ``floor-asyncio``: an asyncio loop answering with this package's ``FrameReader`` and
  ``send_frame`` and nothing else: the worker's transport without its protocol;
- ``worker``: ``codespace-worker serve --fd N --no-runner`` (hardened, handshake done) answering
  ``ping`` through :class:`WorkerClient`.
Workloads: ``ping`` (an empty request) and ``1MiB`` (a request carrying 1 MiB of string
params, a small answer). Rounds interleave the contenders so machine noise hits them alike;
medians of per-round p50s are reported, with the worker's ratio to each floor.

A contender that fails to start or answer fails the benchmark (exit 1), nothing is reported.

    .venv/bin/python benchmarks/worker_bench.py --section protocol [--rounds 5] [--calls 400]

The MCP ``read_file`` call through the worker against in-process, with three clients, is
``worker_read_bench.py`` (it was this file's ``read_file`` section until 2026-12-04).

Section ``lane``: ``fs.read_file`` of a small file through a runner worker
(``codespace-worker serve --fd N``, codespace-fs), p50 per round, median over rounds, interleaved:
on the connection (:meth:`WorkerClient.call`), on the fast lane (:meth:`WorkerClient.call_fast`),
and the runner's own handler called in this process (the work with no process hop at all).

    .venv/bin/python benchmarks/worker_bench.py --section lane [--rounds 5] [--calls 400]

Sections ``exec`` and ``pty``: a real ``codespace serve`` over stdio with ``[runtime] worker =
"off"`` (in-process) and ``"child"``, interleaved round by round (each round checks in
``workspace_info`` that the child server's worker serves): ``exec`` of ``true`` (p50 ms; sandboxed
by the default policy in both, so the worker's own sandbox launcher is measured against the
server's), and a
terminal's throughput (MiB/s: ``tty`` exec printing about 4 MiB, ``lossless``, drained with
read_output; median of ``calls // 20`` runs per round). Targets (issue 14): exec at most 1.2x,
PTY throughput at least 0.8x in-process.

    .venv/bin/python benchmarks/worker_bench.py --section exec [--rounds 5] [--calls 100]
    .venv/bin/python benchmarks/worker_bench.py --section pty [--rounds 5] [--calls 60]
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
from codespace_runtime.framing import send_frame
from codespace_runtime.reader import FrameReader
async def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(False)
    reader = FrameReader(sock)
    while True:
        try:
            request, _ = await reader.next()
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

    def __init__(self, tmp: Path, *, runner: bool = False) -> None:
        self.token = secrets.token_hex(32).encode()
        token_file = tmp / "token"
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, self.token)
        os.close(fd)
        (tmp / "ws").mkdir()
        ours, theirs = socket.socketpair()
        argv = [sys.executable, "-m", "codespace_runtime.cli", "serve", "--workspace", str(tmp / "ws"),
                "--token-file", str(token_file), *([] if runner else ["--no-runner"]), "--fd", str(theirs.fileno())]
        self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()],
                                     env={**os.environ, "CODESPACE_STATE_DIR": str(tmp / "state"),
                                          "CODESPACE_PLUGINS_ALLOW": "fs"})
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


async def lane(rounds: int, calls: int) -> dict:
    from codespace_runtime.runner import handlers_for

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        worker = Worker(root, runner=True)
        (root / "ws" / "a.txt").write_text(READ_TEXT)
        params = {"path": str((root / "ws" / "a.txt").resolve())}
        local = handlers_for(str(root / "ws"), state_dir=str(root / "state-local"))[0]["fs.read_file"]
        try:
            await worker.start()
        except Exception as exc:
            raise SystemExit(f"worker failed to start ({type(exc).__name__}: {exc}): benchmark failed") from None

        async def connection() -> dict:
            return (await worker.client.call("fs.read_file", params))[0]

        async def fast() -> dict:
            result = await worker.client.call_fast("fs.read_file", params)
            if result is None:
                raise SystemExit("the fast lane did not carry the read: benchmark failed")
            return result

        contenders = {"connection": connection, "lane": fast, "in-process handler": lambda: local(dict(params), [])}
        results: dict[str, list[float]] = {name: [] for name in contenders}
        try:
            for _ in range(rounds + 1):  # the first round warms up
                for name, call in contenders.items():
                    samples = []
                    for _ in range(calls):
                        start = time.perf_counter()
                        got = await call()
                        samples.append((time.perf_counter() - start) * 1000)
                        if got["content"] != READ_TEXT:
                            raise SystemExit(f"{name} read {got!r}: benchmark failed")
                    results[name].append(statistics.median(samples))
        finally:
            await worker.close()
    return {name: round(statistics.median(v[1:]), 4) for name, v in results.items()}


READ_TEXT = "hello from a small file\n" * 4


PTY_BYTES = 4 * MIB
PTY_COMMAND = f"head -c {PTY_BYTES * 3 // 4} /dev/zero | base64 -w 76"  # about PTY_BYTES of output


async def _exec_true(client, worker: str, calls: int) -> float:
    samples = []
    for i in range(5 + calls):
        start = time.perf_counter()
        result = await client.call_tool("exec", {"command": ["true"]})
        elapsed = (time.perf_counter() - start) * 1000
        if result.is_error or result.structured_content["exit_code"] != 0:
            raise SystemExit(f"exec true with worker={worker} failed: {result.content[0].text[:300]}")
        if i >= 5:
            samples.append(elapsed)
    return statistics.median(samples)


async def _pty_throughput(client, worker: str, calls: int) -> float:
    """MiB/s of terminal output delivered through read_output (lossless: every byte)."""
    rates = []
    for _ in range(max(1, calls // 20)):
        start = time.perf_counter()
        got = (await client.call_tool("exec", {"command": PTY_COMMAND, "tty": True, "lossless": True,
                                               "yield_ms": 0, "max_bytes": 1_000_000})).structured_content
        total = len(got["output"])
        while got.get("session_id"):
            got = (await client.call_tool("read_output", {"session_id": got["session_id"], "wait_ms": 1000,
                                                          "max_bytes": 1_000_000})).structured_content
            if got is None:
                raise SystemExit(f"read_output with worker={worker} failed")
            total += len(got["output"])
        elapsed = time.perf_counter() - start
        if got["exit_code"] != 0 or total < PTY_BYTES * 0.9:
            raise SystemExit(f"the terminal run with worker={worker} ended {got['exit_code']} after {total} bytes")
        rates.append(total / MIB / elapsed)
    return statistics.median(rates)


WORKLOADS = {"exec": _exec_true, "pty": _pty_throughput}


async def _round(ws: str, state: str, policy: str, worker: str, calls: int, workload: str) -> float:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "codespace", "serve", "--workspace", ws, "--state-dir", state, "--policy", policy,
    ], env={**os.environ, "CODESPACE_PLUGINS_ALLOW": "fs,runtime,pty,linux_sandbox"})
    async with Client(params) as client:
        for _ in range(50):  # the worker starts with the server; wait until it serves
            info = (await client.call_tool("workspace_info", {})).structured_content
            runtime = info["runtime"]
            if runtime["worker"] != worker:
                raise SystemExit(f"server for worker={worker} reports worker={runtime['worker']}: benchmark failed")
            if worker == "off" or runtime["serving"]:
                break
            await asyncio.sleep(0.1)
        else:
            raise SystemExit(f"the child worker never served ({runtime}): benchmark failed")
        found = await WORKLOADS[workload](client, worker, calls)
        if worker == "child" and not (await client.call_tool("workspace_info", {})).structured_content["runtime"]["serving"]:
            raise SystemExit("the child worker stopped serving during the run: benchmark failed")
    return found


async def server_section(rounds: int, calls: int, workload: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text(READ_TEXT)
        policies = {}
        for worker in ("off", "child"):
            policies[worker] = root / f"{worker}.toml"
            policies[worker].write_text(f'[runtime]\nworker = "{worker}"\n')
        p50s: dict[str, list[float]] = {"off": [], "child": []}
        for r in range(rounds):
            order = ("off", "child") if r % 2 == 0 else ("child", "off")
            for worker in order:
                p50s[worker].append(await _round(str(root / "ws"), str(root / f"state-{worker}"),
                                                 str(policies[worker]), worker, calls, workload))
    return {"p50_ms": {w: round(statistics.median(v), 4) for w, v in p50s.items()},  # MiB/s for pty
            "per_round_ms": {w: [round(x, 4) for x in v] for w, v in p50s.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", choices=["protocol", "lane", *WORKLOADS], default="protocol")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    if args.section in WORKLOADS:
        found = asyncio.run(server_section(args.rounds, args.calls, args.section))
        off, child = found["p50_ms"]["off"], found["p50_ms"]["child"]
        unit = "MiB/s" if args.section == "pty" else "ms"
        print(f"{args.section} median: in-process {off:.3f} {unit}  child worker {child:.3f} {unit}  | "
              f"child/in-process {child / off:.2f}x")
        print(json.dumps({"section": args.section, **found, "ratio": round(child / off, 3), "load": os.getloadavg()[0]}))
        return
    if args.section == "lane":
        found = asyncio.run(lane(args.rounds, args.calls))
        print("fs.read_file p50: " + "  ".join(f"{name} {ms:.3f} ms" for name, ms in found.items())
              + f"  | lane/connection {found['lane'] / found['connection']:.2f}x")
        print(json.dumps({"section": "lane", "p50_ms": found, "load": os.getloadavg()[0]}))
        return
    results = asyncio.run(protocol(args.rounds, args.calls))
    for workload, by in results.items():
        worker = by["worker"]
        print(f"{workload:>5}: " + "  ".join(f"{name} {ms:.3f} ms" for name, ms in by.items())
              + "  | " + ", ".join(f"worker/{name} {worker / ms:.2f}x" for name, ms in by.items() if name != "worker"))
    print(json.dumps({"section": args.section, "p50_ms": results, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

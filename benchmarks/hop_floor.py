"""The floor of one round trip between two asyncio processes on this machine.

A worker (codespace-runtime) adds such a round trip to every call it serves; this times the
bare minimum of one: a socket pair, a forked echo process on asyncio, 60-byte messages, with
the wall time per round trip (p50 over ``--calls``) and the CPU each side spends on it.
Nothing of CodeSpace runs here; it says what no protocol over a socket can go below.

    python benchmarks/hop_floor.py --calls 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import time


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _echo(sock: socket.socket) -> None:
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        while True:
            message = await loop.sock_recv(sock, 100)
            if not message:
                os._exit(0)
            await loop.sock_sendall(sock, message)

    asyncio.run(serve())


async def _client(sock: socket.socket, echo_pid: int, calls: int) -> dict:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    for _ in range(300):  # warm-up
        await loop.sock_sendall(sock, b"x" * 60)
        await loop.sock_recv(sock, 100)
    samples = []
    echo_cpu, own_cpu = _cpu_s(echo_pid), time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        await loop.sock_sendall(sock, b"x" * 60)
        if await loop.sock_recv(sock, 100) != b"x" * 60:
            raise SystemExit("the echo process answered something else: benchmark failed")
        samples.append(time.perf_counter() - start)
    return {"p50_us": round(statistics.median(samples) * 1e6, 1),
            "client_cpu_us": round((time.process_time() - own_cpu) / calls * 1e6, 1),
            "echo_cpu_us": round((_cpu_s(echo_pid) - echo_cpu) / calls * 1e6, 1),
            "calls": calls, "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _echo(theirs)
    theirs.close()
    try:
        print(json.dumps(asyncio.run(_client(ours, pid, args.calls))))
    finally:
        ours.close()
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()

"""The floor of one round trip between two processes on this machine.

A worker (codespace-runtime) adds such a round trip to every call it serves; this times the
bare minimum of one: a socket pair, a forked echo process, 60-byte messages, with
the wall time per round trip (p50 over ``--calls``) and the CPU each side spends on it.
Nothing of CodeSpace runs here; it says what no protocol over a socket can go below.

``--mode``: ``asyncio`` (both ends on an event loop, as the worker's connection is),
``blocking`` (both ends sleep in ``recv``, as the fast lane's do with ``lane_spin_us = 0``) or
``polling`` (both ends poll the socket without sleeping until the message is there, as the fast
lane's do while they spin: no wake-up is paid, only the CPU).

    python benchmarks/hop_floor.py --calls 5000 [--mode asyncio|blocking|polling]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import statistics
import time


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _receiver(sock: socket.socket, mode: str):  # noqa: ANN202 - recv(sock) for the mode
    if mode == "blocking":
        return lambda: sock.recv(100)
    poller = select.poll()
    poller.register(sock, select.POLLIN)

    def recv() -> bytes:
        while not poller.poll(0):
            pass
        return sock.recv(100)

    return recv


def _echo(sock: socket.socket, mode: str) -> None:
    if mode != "asyncio":
        recv = _receiver(sock, mode)
        while True:
            message = recv()
            if not message:
                os._exit(0)
            sock.sendall(message)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        while True:
            message = await loop.sock_recv(sock, 100)
            if not message:
                os._exit(0)
            await loop.sock_sendall(sock, message)

    asyncio.run(serve())


def _round_trip(sock: socket.socket, mode: str):  # noqa: ANN202 - an awaitable round trip
    if mode == "asyncio":
        loop = asyncio.get_running_loop()
        sock.setblocking(False)

        async def trip() -> bytes:
            await loop.sock_sendall(sock, b"x" * 60)
            return await loop.sock_recv(sock, 100)

        return trip
    recv = _receiver(sock, mode)

    async def blocking_trip() -> bytes:  # never suspends: the loop only drives the same code
        sock.sendall(b"x" * 60)
        return recv()

    return blocking_trip


async def _client(sock: socket.socket, echo_pid: int, calls: int, mode: str) -> dict:
    trip = _round_trip(sock, mode)
    for _ in range(300):  # warm-up
        await trip()
    samples = []
    echo_cpu, own_cpu = _cpu_s(echo_pid), time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        if await trip() != b"x" * 60:
            raise SystemExit("the echo process answered something else: benchmark failed")
        samples.append(time.perf_counter() - start)
    return {"p50_us": round(statistics.median(samples) * 1e6, 1),
            "client_cpu_us": round((time.process_time() - own_cpu) / calls * 1e6, 1),
            "echo_cpu_us": round((_cpu_s(echo_pid) - echo_cpu) / calls * 1e6, 1),
            "mode": mode, "calls": calls, "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--mode", choices=["asyncio", "blocking", "polling"], default="asyncio")
    args = parser.parse_args()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        _echo(theirs, args.mode)
    theirs.close()
    try:
        print(json.dumps(asyncio.run(_client(ours, pid, args.calls, args.mode))))
    finally:
        ours.close()
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()

"""Egress proxy cost, side by side in one run: a CONNECT tunnel through the proxy versus a
direct loopback connection.

    python benchmarks/proxy_bench.py [--megabytes 100] [--rounds 5] [--connects 200]

Three processes, as in real use: a sender (a server that writes N MB to every connection
and closes), the proxy (``EgressProxy`` from codespace-linux-sandbox in a process
of its own, on its asyncio loop, allowing 127.0.0.1), and this process as the client, which
reads to the end. Rounds alternate direct and proxied so machine load hits both alike.

- throughput: MB/s reading N MB, direct versus through ``CONNECT 127.0.0.1:<port>``;
  medians over the rounds, and their ratio (target >= 0.5); and the proxy process's CPU time
  (user + system, from /proc) per 100 MB tunnelled, which does not depend on how many cores
  the three processes share;
- connect latency: time until data can flow, per connection, sequentially: a TCP connect
  (direct) versus a TCP connect to the proxy plus ``CONNECT`` and its ``200`` (proxied);
  medians and the difference (target <= 1 ms added).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SENDER = """
import socket, socketserver, sys
CHUNK = 1 << 20
SIZE = int(sys.argv[1])
BLOCK = memoryview(b"\\0" * CHUNK)

class Sender(socketserver.BaseRequestHandler):
    def handle(self):
        if self.request.recv(1) == b"S":  # send the payload and close
            left = SIZE
            while left > 0:
                left -= self.request.send(BLOCK[: min(left, CHUNK)])
        else:  # a ping, for connect latency: one byte back
            self.request.sendall(b"!")

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = daemon_threads = True
    request_queue_size = 1024

server = Server(("127.0.0.1", 0), Sender)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

PROXY = """
import anyio, sys
from codespace_linux_sandbox.proxy import DomainRules, EgressProxy

async def main():
    proxy = EgressProxy(DomainRules(["127.0.0.1"], [], allow_local_binding=True), lambda event: None)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve_tcp)
        print(port, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)
        tg.cancel_scope.cancel()

anyio.run(main)
"""

CHUNK = 1 << 20
def _read_all(sock: socket.socket) -> int:
    buffer = bytearray(CHUNK)
    total = 0
    while n := sock.recv_into(buffer):
        total += n
    return total


def _open(port: int, target: int | None) -> tuple[socket.socket, bytes]:
    """A connection to the sender: direct (``target`` None) or through the proxy at ``port``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if target is None:
        return sock, b""
    sock.sendall(f"CONNECT 127.0.0.1:{target} HTTP/1.1\r\nHost: 127.0.0.1:{target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError(f"the proxy closed the tunnel: {head!r}")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy refused: {head[:200]!r}")
    return sock, head.split(b"\r\n\r\n", 1)[1]


def throughput(sender: int, proxy: int | None, size: int) -> float:
    start = time.perf_counter()
    sock, early = _open(proxy if proxy else sender, sender if proxy else None)
    with sock:
        sock.sendall(b"S")
        got = len(early) + _read_all(sock)
    elapsed = time.perf_counter() - start
    assert got == size, (got, size)
    return size / elapsed / 1e6


def connect_latency(sender: int, proxy: int | None) -> float:
    start = time.perf_counter()
    sock, _ = _open(proxy if proxy else sender, sender if proxy else None)
    elapsed = time.perf_counter() - start
    with sock:
        sock.sendall(b"P")
        assert sock.recv(1) == b"!"
    return elapsed * 1000


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connects", type=int, default=200)
    args = parser.parse_args()
    size = args.megabytes * 1_000_000
    sender_proc = subprocess.Popen([sys.executable, "-c", SENDER, str(size)], stdout=subprocess.PIPE)
    proxy_proc = subprocess.Popen([sys.executable, "-c", PROXY], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        sender = int(sender_proc.stdout.readline())
        proxy = int(proxy_proc.stdout.readline())
        throughput(sender, None, size), throughput(sender, proxy, size)  # warm-up
        mbps: dict[str, list[float]] = {"direct": [], "proxied": []}
        proxy_cpu = 0.0
        for _ in range(args.rounds):
            mbps["direct"].append(throughput(sender, None, size))
            before = _cpu_seconds(proxy_proc.pid)
            mbps["proxied"].append(throughput(sender, proxy, size))
            proxy_cpu += _cpu_seconds(proxy_proc.pid) - before
        latency: dict[str, list[float]] = {"direct": [], "proxied": []}
        for _ in range(args.connects):
            latency["direct"].append(connect_latency(sender, None))
            latency["proxied"].append(connect_latency(sender, proxy))
    finally:
        proxy_proc.stdin.close()
        proxy_proc.wait(timeout=10)
        sender_proc.kill()
        sender_proc.wait()
    tput = {k: round(statistics.median(v), 1) for k, v in mbps.items()}
    lat = {k: round(statistics.median(v), 3) for k, v in latency.items()}
    report = {
        "megabytes": args.megabytes, "rounds": args.rounds, "connects": args.connects,
        "throughput_MBps": tput, "throughput_ratio": round(tput["proxied"] / tput["direct"], 3),
        "proxy_cpu_ms_per_100MB": round(proxy_cpu * 1000 / args.rounds * 100 / args.megabytes, 1),
        "connect_ms": lat, "added_connect_ms": round(lat["proxied"] - lat["direct"], 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

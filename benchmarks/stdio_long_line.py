#!/usr/bin/env python3
"""How long a real ``codespace serve`` (stdio) takes to answer after one very long line.

The client initializes, sends one ``tools/call`` line of ``--mb`` MiB (a ``write_file`` whose
content is that long) followed by a ``ping``, and times from the first byte of the long
line to both answers. Below the transport's 64 MiB line cap the gateway refuses the call
for ``limits.max_argument_bytes``; above it the transport drops the line unread and answers
-32600. Each size runs ``--rounds`` times against a fresh server; medians are printed.
Usage: python benchmarks/stdio_long_line.py [--mb 50 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}


def one(size_mb: int, workspace: str) -> float:
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "codespace"), "serve", "--workspace",
                               workspace], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        server.stdin.write(json.dumps(INIT).encode() + b"\n")
        server.stdin.flush()
        server.stdout.readline()
        chunk = b"x" * (1 << 20)
        started = time.monotonic()
        server.stdin.write(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"write_file",'
                           b'"arguments":{"path":"a","content":"')
        for _ in range(size_mb):
            server.stdin.write(chunk)
        server.stdin.write(b'"}}}\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
        server.stdin.flush()
        answers = [json.loads(server.stdout.readline()) for _ in range(2)]
        took = time.monotonic() - started
        if {a.get("id") for a in answers} not in ({9, 2}, {None, 2}):
            raise SystemExit(f"unexpected answers: {str(answers)[:300]}")
        return took
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, nargs="+", default=[50, 300])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workspace:
        for size in args.mb:
            times = [one(size, workspace) for _ in range(args.rounds)]
            print(f"{size} MiB line: answered after {statistics.median(times):.2f} s (median of {args.rounds}; "
                  f"{', '.join(f'{t:.2f}' for t in times)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

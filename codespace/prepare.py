"""``codespace prepare``: make the next start answer ``tools/list`` at once.

A start without a kept tool listing (the first after an install, a plugin change or an
edit of the policy's [plugins] table) builds the tools and writes the listing before it
answers ``tools/list``: about as long as the reference filesystem server's whole start on a
quiet machine, three times a kept listing's (benchmarks/README.md), and more on a busy one,
which a client's first model request may not wait for. ``prepare``
runs that start now, as a real ``codespace serve`` over stdio started the way the
caller was started (the listing is keyed by the interpreter and its import path), and
ends it; the server keeps the listing as it always does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

_HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "codespace-prepare", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def _serve_command() -> list[str]:
    """``codespace serve`` as this process was started: the console script, or ``python -m codespace``."""
    if os.path.basename(sys.argv[0]) == "__main__.py":
        return [sys.executable, "-m", "codespace", "serve"]
    return [sys.argv[0], "serve"]


def prepare(workspace: str | None, policy: str | None, state_dir: str | None) -> int:
    argv = _serve_command()
    for flag, value in (("--workspace", workspace), ("--policy", policy), ("--state-dir", state_dir)):
        if value is not None:
            argv += [flag, value]
    wire = b"".join(json.dumps(m).encode() + b"\n" for m in _HANDSHAKE)
    started = time.monotonic()
    done = subprocess.run(argv, input=wire, capture_output=True, timeout=300)
    took = time.monotonic() - started
    answers = {}
    for line in done.stdout.splitlines():
        message = json.loads(line)
        answers[message.get("id")] = message
    listing = answers.get(2, {}).get("result")
    if done.returncode != 0 or listing is None:
        print(f"codespace prepare: the server did not list its tools (exit {done.returncode}): "
              f"{(done.stderr.decode(errors='replace') or json.dumps(answers.get(2)))[-1500:]}", file=sys.stderr)
        return 1
    names = sorted(tool["name"] for tool in listing["tools"])
    print(f"codespace prepare: {len(names)} tools listed in {took:.1f} s; the next start answers tools/list "
          f"from the kept listing ({', '.join(names)})", file=sys.stderr)
    return 0

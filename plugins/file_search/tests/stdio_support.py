"""A real server process on stdio, spoken to in raw JSON lines: what a strict client reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pydantic_core

CODESPACE = os.path.join(os.path.dirname(sys.executable), "codespace")
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def serve_argv(ws: Path, state: Path) -> list[str]:
    return [CODESPACE, "serve", "--workspace", str(ws), "--state-dir", str(state)]


def strict(line: bytes) -> dict:
    """The message, parsed as strict JSON parsers parse it (a lone surrogate is refused)."""
    assert not SURROGATE_ESCAPE.search(line), line
    message = pydantic_core.from_json(line)
    json.dumps(message, ensure_ascii=False).encode("utf-8")  # and none is left after parsing
    return message


def raw_calls(ws: Path, state: Path, calls: list[tuple[str, dict]], timeout: float = 60) -> list[dict]:
    """The result of each tool call, made in one session that ends when stdin closes; the
    server must answer them all and exit within ``timeout`` seconds."""
    messages = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    messages += [{"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
                 for n, (tool, arguments) in enumerate(calls, 1)]
    server = subprocess.Popen(serve_argv(ws, state), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        out, _ = server.communicate(b"".join(json.dumps(m).encode() + b"\n" for m in messages), timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        raise AssertionError(f"the server did not answer {[tool for tool, _ in calls]} and exit "
                             f"within {timeout:g} s") from None
    replies = {m.get("id"): m for m in map(strict, out.splitlines())}
    return [replies[n]["result"] for n in range(1, len(calls) + 1)]

"""kill -9 in the middle of large writes, in a loop: the file is always the old or
the new content in full, never a mix or a truncation."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from codespace_fs.writing import TMP_SUFFIX

from codespace.testing import server_pids

pytestmark = pytest.mark.anyio

SIZE = 8 * 1024 * 1024
ROUNDS = 30

WRITER = r"""
import sys, anyio
from codespace.contract import WriteFileRequest
from codespace.workspace import Workspace
from codespace_fs.backend import FsBackend

ws, state, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
backend = FsBackend(Workspace.open(ws, state_dir=state), "openat2")
contents = [c * size for c in "AB"]

async def main():
    n = 0
    while True:
        await backend.write_file(WriteFileRequest(path=f"{ws}/target.bin", content=contents[n % 2]))
        n += 1
        if n == 1:
            print("ready", flush=True)

anyio.run(main)
"""


def _check_whole(path: Path, size: int) -> str:
    data = path.read_bytes()
    assert len(data) == size, f"torn write: {len(data)} bytes"
    first = data[:1]
    assert first in (b"A", b"B") and data.count(first) == size, "torn write: mixed content"
    return first.decode()


async def test_kill_9_during_large_writes_never_tears(ws, state):
    seen = set()
    rng = random.Random(1234)
    for _ in range(ROUNDS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(ws), str(state), str(SIZE)], stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        seen.add(_check_whole(ws / "target.bin", SIZE))
    assert seen == {"A", "B"}  # both contents were caught as the last complete one
    leftovers = [n for n in os.listdir(ws) if n.endswith(TMP_SUFFIX)]
    # The new content is written to an unnamed file and named only once complete, so a
    # kill mid-write leaves nothing behind (only one in the microseconds between naming
    # it and the rename could).
    assert len(leftovers) <= 1, leftovers


async def test_kill_9_of_the_server_mid_write_file(ws, state):
    env = dict(os.environ, CODESPACE_PLUGINS_ALLOW="fs")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "codespace", "serve", "--workspace", str(ws), "--state-dir", str(state)], env=env,
    )
    size = 3 * 1024 * 1024  # within the default 4 MiB argument limit
    rng = random.Random(99)
    seen = set()
    for round_ in range(6):
        async with Client(params) as client:
            pid = server_pids(state)[0]

            async def writes(n: int) -> None:
                while True:
                    try:
                        await client.call_tool("write_file", {"path": "t.txt", "content": "AB"[n % 2] * size})
                    except Exception:  # noqa: BLE001 - the connection dies with the server
                        return
                    n += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(writes, round_)
                await anyio.sleep(rng.uniform(0.2, 0.8))
                os.kill(pid, signal.SIGKILL)
                await anyio.sleep(0.2)
                tg.cancel_scope.cancel()
        if (ws / "t.txt").exists():
            seen.add(_check_whole(ws / "t.txt", size))
    assert seen, "no write completed before the kills"

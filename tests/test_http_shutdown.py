"""Stopping ``codespace serve --transport http`` with SIGTERM or SIGINT (a service manager, a
container stop, Ctrl-C) while commands run: the commands end, no record stays 'running', and
the store closes cleanly. A real server subprocess and a real MCP client over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_ok

from .conftest import codespace_cmd, http_serving, subprocess_env
from .test_shutdown import _alive

pytestmark = pytest.mark.anyio

EXIT_BOUND_S = 5.0  # uvicorn's own shutdown plus ours, on a loaded 2-core CI machine


async def _start_sleeps(url: str, token: str, marker: str) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            for _ in range(2):
                started = await call_ok(client, "exec", {"command": f"exec sleep {marker}", "yield_ms": 100})
                assert started["running"], started


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
async def test_a_signal_stops_the_http_server_with_its_commands_and_store_closed(ws, state, how):
    marker = f"41.{uuid.uuid4().int % 10**6:06d}"
    argv = [*codespace_cmd(), "serve", "--transport", "http", "--port", "0", "--workspace", str(ws),
            "--state-dir", str(state)]
    with http_serving(argv, subprocess_env(**{ENV_ALLOW: "fs,pty,linux_sandbox"})) as (url, proc):
        await _start_sleeps(url, (state / "http-token").read_text().strip(), marker)
        assert len(_alive(marker)) >= 2
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=30)
        took = time.monotonic() - t0
    print(f"\n{how}: exited {proc.returncode} after {took * 1000:.0f} ms")
    assert took < EXIT_BOUND_S, f"{how}: {took * 1000:.0f} ms"
    assert _alive(marker) == [], "a command outlived the server"
    assert not (state / "operations.sqlite3-wal").exists(), "the store was not closed"
    listing = subprocess.run([*codespace_cmd(), "ops", "list", "--json", "--workspace", str(ws),
                              "--state-dir", str(state)], capture_output=True, text=True, timeout=60,
                             env=subprocess_env())
    records = [r for r in json.loads(listing.stdout) if r["tool"] == "exec"]
    assert len(records) == 2 and all(r["status"] != "running" for r in records), records

"""Real transports: a stdio subprocess session and HTTP with a bearer token."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_error, call_ok

from .conftest import codespace_cmd, subprocess_env

pytestmark = pytest.mark.anyio


def stdio_params(ws: Path, state: Path, *extra: str, **env: str) -> StdioServerParameters:
    cmd = codespace_cmd()
    return StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "serve", "--workspace", str(ws), "--state-dir", str(state), *extra],
        env=subprocess_env(**{ENV_ALLOW: "example", **env}),
    )


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
async def test_stdio_subprocess_session(ws, state, client_mode):
    async with Client(stdio_params(ws, state), mode=client_mode) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"workspace_info", "tally", "read_file"} <= names
        info = await call_ok(client, "workspace_info")
        assert info["root"] == str(ws.resolve())
        first = await call_ok(client, "tally", {"name": "stdio", "operation_id": "s1"})
        again = await call_ok(client, "tally", {"name": "stdio", "operation_id": "s1"})
        assert again == {**first, "replayed": True}
        record = await call_ok(client, "get_operation", {"operation_id": "s1"})
        assert record["client"].startswith("stdio")


async def test_stdio_survives_garbage_and_huge_lines(ws, state):
    """Malformed JSON and an oversized call on the wire get errors; the session goes on."""
    proc = subprocess.Popen(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=subprocess_env(**{ENV_ALLOW: "example"}),
    )

    def send(message) -> None:
        proc.stdin.write((message if isinstance(message, str) else json.dumps(message)).encode() + b"\n")
        proc.stdin.flush()

    def receive() -> dict:
        return json.loads(proc.stdout.readline())

    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        assert receive()["result"]["serverInfo"]["name"] == "codespace"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send("{this is not json")
        garbage_reply = receive()
        assert garbage_reply["error"]["code"] == -32700
        huge = "x" * (5 * 1024 * 1024)
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "write_file", "arguments": {"path": "big", "content": huge}}})
        reply = receive()
        assert reply["id"] == 2 and reply["result"]["isError"] is True
        assert "limits.max_argument_bytes" in reply["result"]["content"][0]["text"]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "ok"}}})
        reply = receive()
        assert reply["id"] == 3 and reply["result"]["structuredContent"]["count"] == 1
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0


@contextmanager
def http_server(ws: Path, state: Path, *extra: str, **env: str):
    proc = subprocess.Popen(
        [*codespace_cmd(), "serve", "--transport", "http", "--port", "0", "--workspace", str(ws),
         "--state-dir", str(state), *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=subprocess_env(**{ENV_ALLOW: "example", **env}),
    )
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError(f"server exited early: {proc.wait()}")
            match = re.search(r"listening on (http://\S+/mcp)", line)
            if match:
                url = match.group(1)
        assert url, "server did not announce its address"
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        assert proc.stdout.read() == ""  # nothing on stdout, ever


async def test_http_session_with_token(ws, state):
    with http_server(ws, state) as (url, _):
        token_file = state / "http-token"
        assert os.stat(token_file).st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                info = await call_ok(client, "workspace_info")
                assert info["root"] == str(ws.resolve())
                assert (await call_ok(client, "tally", {"name": "http"}))["count"] == 1
                refused = await call_error(client, "read_file", {"path": "/proc/1/environ"})
                assert refused["rule"] == "filesystem.paths['/proc']"


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_http_refuses_without_token_and_with_bad_origin_or_host(ws, state):
    with http_server(ws, state) as (url, _):
        token = (state / "http-token").read_text().strip()
        async with httpx2.AsyncClient(timeout=30) as http:
            missing = await http.post(url, json=INIT, headers=HEADERS)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"].startswith("Bearer")
            assert "http-token" in missing.json()["message"]
            wrong = await http.post(url, json=INIT, headers={**HEADERS, "Authorization": "Bearer not-the-token"})
            assert wrong.status_code == 401
            auth = {**HEADERS, "Authorization": f"Bearer {token}"}
            evil_origin = await http.post(url, json=INIT, headers={**auth, "Origin": "http://evil.example"})
            assert evil_origin.status_code == 403
            evil_host = await http.post(url, json=INIT, headers={**auth, "Host": "evil.example"})
            assert evil_host.status_code == 421
            good = await http.post(url, json=INIT, headers={**auth, "Origin": url.rsplit("/mcp", 1)[0]})
            assert good.status_code == 200


async def test_http_token_from_file_and_loopback_only(ws, state, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("a-very-long-operator-chosen-token\n")
    with http_server(ws, state, "--token-file", str(token_file)) as (url, _):
        async with httpx2.AsyncClient(timeout=30) as http:
            ok = await http.post(url, json=INIT, headers={**HEADERS, "Authorization": "Bearer a-very-long-operator-chosen-token"})
            assert ok.status_code == 200
    refused = subprocess.run(
        [*codespace_cmd(), "serve", "--transport", "http", "--host", "0.0.0.0", "--workspace", str(ws),
         "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60, env=subprocess_env(),
    )
    assert refused.returncode == 2 and "loopback only" in refused.stderr


async def test_sessions_outlive_a_client_connection(ws, state):
    """Over HTTP the server outlives its clients: a session started by one client is
    re-attached by id from another."""
    with http_server(ws, state) as (url, _):
        token = (state / "http-token").read_text().strip()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as first:
                started = await call_ok(first, "exec", {"command": "echo one; sleep 1; echo two; sleep 30",
                                                        "yield_ms": 200})
                assert started["running"] and started["output"] == "one\n"
            async with Client(streamable_http_client(url, http_client=http)) as second:
                listed = await call_ok(second, "list_sessions")
                assert started["session_id"] in [s["session_id"] for s in listed["sessions"]]
                more = await call_ok(second, "read_output", {"session_id": started["session_id"], "wait_ms": 5000})
                assert more["output"] == "two\n" and more["seq"] == started["next_seq"]
                stopped = await call_ok(second, "terminate", {"session_id": started["session_id"]})
                assert stopped["running"] is False

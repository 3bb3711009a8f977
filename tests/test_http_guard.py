"""The HTTP transport under hostile connections and requests: a real server process,
real sockets, no mocks.

Half-sent requests (headers never finished, a body never completed) used to hold a
descriptor each, forever: a flood of them used the process's descriptors up, locked
the real clients out and filled stderr with accept tracebacks. And a tool call with a
lone surrogate in its arguments was answered ahead of the SDK's Host/Origin and
session checks.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_ok

from .conftest import codespace_cmd, subprocess_env

pytestmark = pytest.mark.anyio

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "guard", "version": "0"}}}
SURROGATE_CALL = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                             "params": {"name": "tally", "arguments": {"name": "w\udcff"}}}).encode()
PLAIN_CALL = json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                         "params": {"name": "tally", "arguments": {"name": "w"}}}).encode()
HALF_SENT = b"GET / HTTP/1.1\r\nHost: x\r\n"  # never finishes its headers, carries no token


@contextmanager
def serving(ws: Path, state: Path, tmp_path: Path, *, fd_limit: int | None = None,
            **env: str) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """``codespace serve --transport http`` with its stderr in a file, to be measured whole."""
    stderr_path = tmp_path / "server-stderr.log"

    def limit_descriptors() -> None:
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [*codespace_cmd(), "serve", "--transport", "http", "--port", "0", "--workspace", str(ws),
             "--state-dir", str(state)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, preexec_fn=limit_descriptors,
            env=subprocess_env(**{ENV_ALLOW: "example", **env}),
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            assert proc.poll() is None, f"the server exited early:\n{stderr_path.read_text()}"
            assert time.monotonic() < deadline, "the server did not announce its address"
            match = re.search(r"listening on (http://\S+/mcp)", stderr_path.read_text())
            url = match.group(1) if match else time.sleep(0.05)
        yield url, proc, stderr_path
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stdout.read() == b""  # nothing on stdout, ever


def _open_fds(proc: subprocess.Popen) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def _address(url: str) -> tuple[str, int]:
    host, port = re.match(r"http://([^/]+):(\d+)/", url).groups()
    return host.strip("[]"), int(port)


def _closed_by_server(sock: socket.socket, wait: float) -> bool:
    """Whether the server has closed ``sock`` (whatever it wrote first), waiting up to ``wait``."""
    sock.settimeout(wait)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def _legitimate_call(url: str, token: str) -> dict:
    with anyio.fail_after(30):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=20) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return await call_ok(client, "tally", {"name": "legit"})


async def _open_session(http: httpx2.AsyncClient, url: str, auth: dict[str, str]) -> dict[str, str]:
    """initialize, then initialized: the headers of the session's requests."""
    opened = await http.post(url, json=INIT, headers=auth)
    session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    return session


def _assert_quiet(stderr_path: Path) -> None:
    log = stderr_path.read_text()
    assert len(log) < 16_000, f"{len(log)} bytes on stderr:\n{log[:3000]}"
    # The example plugin's one service fails on purpose, with its traceback; no other may appear.
    assert log.count("Traceback") == log.count("RuntimeError: this service fails on purpose"), log[:3000]
    assert "ClientDisconnect" not in log and "Too many open files" not in log, log[:3000]


async def test_a_flood_of_half_sent_requests_locks_no_one_out(ws, state, tmp_path):
    """1,500 connections that never finish their headers, against a server allowed 400
    descriptors and 50 connections: the descriptors stay bounded, an authenticated MCP
    call still goes through, and stderr holds a few lines, not an accept traceback apiece."""
    cap = 50
    with serving(ws, state, tmp_path, fd_limit=400, CODESPACE_HTTP_MAX_CONNECTIONS=str(cap),
                 CODESPACE_HTTP_REQUEST_TIMEOUT="300") as (url, proc, stderr_path):
        token = (state / "http-token").read_text().strip()
        await _legitimate_call(url, token)
        baseline = _open_fds(proc)
        flood: list[socket.socket] = []
        try:
            for _ in range(1500):
                try:
                    sock = socket.create_connection(_address(url), timeout=3)
                except TimeoutError:
                    break  # the server stopped accepting: what this test is about
                flood.append(sock)
                sock.sendall(HALF_SENT)
            time.sleep(1)
            held = _open_fds(proc)
            result = await _legitimate_call(url, token)
            assert result["name"] == "legit", result
            assert len(flood) == 1500, f"the server stopped accepting after {len(flood)} connections"
            assert held <= baseline + cap + 10, f"{held} descriptors open (baseline {baseline}, cap {cap})"
            still_open = sum(not _closed_by_server(sock, 0.01) for sock in flood)
            assert still_open <= cap, f"{still_open} half-sent requests still held"
        finally:
            for sock in flood:
                sock.close()
        _assert_quiet(stderr_path)


async def test_clients_that_never_read_their_refusals_lock_no_one_out(ws, state, tmp_path):
    """Connections that pipeline thousands of token-less requests and read none of the 401s:
    the answers queued unsent, so each connection was busy answering, out of reach of the
    request deadline and of displacement, and a real client got 503 for as long as the attack
    lasted. A 401 now ends its connection (one refusal per connection)."""
    cap = 20
    with serving(ws, state, tmp_path, CODESPACE_HTTP_MAX_CONNECTIONS=str(cap),
                 CODESPACE_HTTP_REQUEST_TIMEOUT="3") as (url, proc, stderr_path):
        token = (state / "http-token").read_text().strip()
        host, port = _address(url)
        burst = f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode() * 3000
        stuck: list[socket.socket] = []
        try:
            for _ in range(2 * cap):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                sock.connect((host, port))
                sock.setblocking(False)
                try:
                    sock.send(burst)
                except BlockingIOError:
                    pass
                stuck.append(sock)
            time.sleep(1)
            result = await _legitimate_call(url, token)
            assert result["name"] == "legit", result
            assert all(_closed_by_server(sock, 5) for sock in stuck)
        finally:
            for sock in stuck:
                sock.close()
        _assert_quiet(stderr_path)


async def test_a_request_must_arrive_whole_in_time(ws, state, tmp_path):
    """Headers trickled a byte at a time, and a body that stops short, are cut off at the
    request timeout; a client that leaves mid-body costs the log no traceback."""
    with serving(ws, state, tmp_path, CODESPACE_HTTP_REQUEST_TIMEOUT="2") as (url, proc, stderr_path):
        token = (state / "http-token").read_text().strip()
        address = _address(url)

        trickle = socket.create_connection(address, timeout=5)
        t0 = time.monotonic()
        closed = False
        for byte in HALF_SENT * 4:  # a slowloris: some byte always on its way
            try:
                trickle.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if _closed_by_server(trickle, 0.25):
                closed = True
                break
        took = time.monotonic() - t0
        assert closed and 1.5 < took < 8, f"closed={closed} after {took:.1f}s"
        trickle.close()

        head = (f"POST /mcp HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                "Content-Length: 1000\r\n\r\n").encode()
        short = socket.create_connection(address, timeout=5)
        t0 = time.monotonic()
        short.sendall(head + b'{"jsonrpc": "2.0", ')
        assert _closed_by_server(short, 10), "a body that stopped short was held past the timeout"
        took = time.monotonic() - t0
        assert 1.5 < took < 8, f"closed after {took:.1f}s"
        short.close()

        for _ in range(5):
            leaving = socket.create_connection(address, timeout=5)
            leaving.sendall(head + b'{"jsonrpc": "2.0", ')
            time.sleep(0.1)
            leaving.close()

        assert (await _legitimate_call(url, token))["name"] == "legit"
        time.sleep(0.5)
        _assert_quiet(stderr_path)


async def test_the_surrogate_shortcut_passes_the_sdks_checks_first(ws, state, tmp_path):
    """A tool call with a lone surrogate in its arguments gets the gateway's answer only
    where the SDK would have served the call: Host, Origin and session come first."""
    with serving(ws, state, tmp_path) as (url, _, stderr_path):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            for body in (SURROGATE_CALL, PLAIN_CALL):
                evil_host = await http.post(url, content=body, headers={**auth, "Host": "evil.example"})
                assert evil_host.status_code == 421, evil_host.text
                evil_origin = await http.post(url, content=body, headers={**auth, "Origin": "http://evil.example"})
                assert evil_origin.status_code == 403, evil_origin.text
                # The refusals name the rule and where to connect from instead.
                assert "Invalid Host header" in evil_host.text and _address(url)[0] in evil_host.text
                assert "Invalid Origin header" in evil_origin.text and "non-browser client" in evil_origin.text

            no_session = await http.post(url, content=SURROGATE_CALL, headers=auth)
            assert no_session.status_code == 400, no_session.text
            assert "mcp-session-id" in no_session.json()["error"]["message"]
            unknown = await http.post(url, content=SURROGATE_CALL, headers={**auth, "mcp-session-id": "f" * 32})
            assert unknown.status_code == 404, unknown.text

            session = await _open_session(http, url, auth)
            served = await http.post(url, content=SURROGATE_CALL, headers=session)
            assert served.status_code == 200, served.text
            result = served.json()["result"]
            assert result["isError"] is True and "argument 'name' holds a lone surrogate" in result["content"][0]["text"]

            ended = await http.delete(url, headers=session)
            assert ended.status_code == 200, ended.text
            after_end = await http.post(url, content=SURROGATE_CALL, headers=session)
            assert after_end.status_code == 404, after_end.text
        _assert_quiet(stderr_path)


async def test_a_failed_initialize_opens_no_session_and_host_names_are_caseless(ws, state, tmp_path):
    """Found by testing from outside: an initialize whose params did not validate was refused
    but still opened a session, and 246 of them took 246 of the 256 places (then a real
    client got 503); an initialize sent as a notification got "Missing session ID" and a
    session id header; and Host "LocalHost:port" got 421, though host names are caseless."""
    with serving(ws, state, tmp_path, CODESPACE_HTTP_MAX_SESSIONS="2") as (url, _, stderr_path):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            for _ in range(3):
                bad = await http.post(url, json={**INIT, "params": {}}, headers=auth)
                assert bad.status_code == 400 and "mcp-session-id" not in bad.headers, (bad.status_code, bad.headers)
                error = bad.json()["error"]
                assert error["code"] == -32602 and "params.capabilities" in error["data"], error
            notified = await http.post(url, json={k: v for k, v in INIT.items() if k != "id"}, headers=auth)
            assert notified.status_code == 400 and "mcp-session-id" not in notified.headers, notified.text
            assert "initialize is a request" in notified.json()["error"]["message"], notified.text
            opened = await http.post(url, json=INIT, headers={**auth, "Host": f"LocalHost:{_address(url)[1]}"})
            assert opened.status_code == 200 and opened.headers.get("mcp-session-id"), opened.text
        assert await _legitimate_call(url, token)
        _assert_quiet(stderr_path)


async def test_a_cancel_naming_the_id_as_text_does_not_cancel_the_number(ws, state, tmp_path):
    """Found by testing from outside: over HTTP, notifications/cancelled with requestId "6"
    cancelled the call whose id is the number 6 (the SDK keys requests by the id's text);
    over stdio, and in JSON-RPC, they are two ids. The cancel is dropped."""
    with serving(ws, state, tmp_path) as (url, _, stderr_path):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            session = await _open_session(http, url, auth)
            call = {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                    "params": {"name": "exec", "arguments": {"command": "sleep 1.5; echo done"}}}
            answers = {}

            async def run() -> None:
                answers["call"] = await http.post(url, json=call, headers=session)

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await anyio.sleep(0.5)
                cancel = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/cancelled",
                                                    "params": {"requestId": "6"}}, headers=session)
        assert cancel.status_code == 202, cancel.text
        body = answers["call"].text
        assert '"error"' not in body and "done" in body, body
        _assert_quiet(stderr_path)

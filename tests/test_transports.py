"""Real transports: a stdio subprocess session and HTTP with a bearer token."""

from __future__ import annotations

import asyncio

import json
import os
import re
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_error, call_ok

from .conftest import codespace_cmd, http_serving, subprocess_env

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


def test_stdio_pipelined_lines_are_all_answered(ws, state):
    """One write carrying SDK requests, direct tool calls and garbage, then end of input
    with an unterminated last line: every request is answered exactly once."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        *({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
           "params": {"name": "tally", "arguments": {"name": "seq"}}} for i in range(3)),
        "{not json",
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "seq"}}},
    ]
    wire = "\n".join(m if isinstance(m, str) else json.dumps(m) for m in lines)  # no final newline
    done = subprocess.run(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        input=wire.encode(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60,
        env=subprocess_env(**{ENV_ALLOW: "example"}),
    )
    assert done.returncode == 0
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {r.get("id"): r for r in replies}
    assert by_id[1]["result"]["serverInfo"]["name"] == "codespace"
    assert any(t["name"] == "tally" for t in by_id[2]["result"]["tools"])
    assert by_id[3]["result"] == {}
    assert by_id[None]["error"]["code"] == -32700
    counts = [by_id[10 + i]["result"]["structuredContent"]["count"] for i in range(4)]
    assert sorted(counts) == [1, 2, 3, 4]


def test_a_dead_stdio_client_does_not_hold_the_server_or_its_commands(ws, state):
    """Found by testing from outside: a client killed while an exec call waited (both of its pipe
    ends closed) kept the server and the command alive for the whole end-of-input settle (60 s).
    With nobody reading, the server stops at once and ends the command."""
    marker = "301.25"  # sleep's argument: this test's command among the machine's processes
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "exec", "arguments": {"command": ["sleep", marker], "yield_ms": 300000}}},
    ]
    proc = subprocess.Popen(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=subprocess_env(**{ENV_ALLOW: "example"}),
    )
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines).encode())
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        deadline = time.monotonic() + 20
        while not _pids_running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pids_running(marker), "the command did not start"
        proc.stdin.close()
        proc.stdout.close()  # the client is gone: nobody reads the answer
        started = time.monotonic()
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - started < 5  # the yield alone was 10 s (then the settle limit, 60 s)
        deadline = time.monotonic() + 5
        while _pids_running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _pids_running(marker)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _pids_running(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def http_server(ws: Path, state: Path, *extra: str, **env: str):
    return http_serving(
        [*codespace_cmd(), "serve", "--transport", "http", "--port", "0", "--workspace", str(ws),
         "--state-dir", str(state), *extra],
        subprocess_env(**{ENV_ALLOW: "example", **env}),
    )


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
            assert "Authorization: Bearer <token>" in missing.json()["message"]
            assert str(state) not in missing.text and "http-token" not in missing.text  # no path to strangers
            wrong = await http.post(url, json=INIT, headers={**HEADERS, "Authorization": "Bearer not-the-token"})
            assert wrong.status_code == 401
            auth = {**HEADERS, "Authorization": f"Bearer {token}"}
            evil_origin = await http.post(url, json=INIT, headers={**auth, "Origin": "http://evil.example"})
            assert evil_origin.status_code == 403
            evil_host = await http.post(url, json=INIT, headers={**auth, "Host": "evil.example"})
            assert evil_host.status_code == 421
            good = await http.post(url, json=INIT, headers={**auth, "Origin": url.rsplit("/mcp", 1)[0]})
            assert good.status_code == 200
            for scheme in ("bearer", "BEARER", "BeArEr"):  # schemes are case-insensitive (RFC 9110)
                other_case = await http.post(url, json=INIT, headers={**HEADERS, "Authorization": f"{scheme} {token}"})
                assert other_case.status_code == 200, scheme
            wrong_case_token = await http.post(url, json=INIT, headers={**HEADERS,
                                                                        "Authorization": f"Bearer {token.swapcase()}"})
            assert wrong_case_token.status_code == 401  # the token itself is not


def test_a_refused_token_is_answered_whole_even_when_the_body_arrives_after_the_headers(ws, state):
    """Found in CI under load: the 401 (with ``connection: close``) went out before the request's
    body had arrived, and closing a socket with unread data makes the kernel reset it, so the
    client saw "connection reset" instead of the message saying what to send. The body is read
    first now. A raw client sends the headers, then the body in pieces, then reads."""
    import socket
    from urllib.parse import urlsplit

    body = json.dumps({**INIT, "params": {**INIT["params"], "pad": "x" * 200_000}}).encode()
    with http_server(ws, state) as (url, _):
        parts = urlsplit(url)
        for attempt in range(3):
            with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer wrong\r\n"
                             f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode())
                time.sleep(0.2)  # the server has the headers alone, and answers them
                for start in range(0, len(body), 16_384):
                    sock.sendall(body[start:start + 16_384])
                    time.sleep(0.002)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
            assert b"Authorization: Bearer <token>" in answer, answer


async def test_http_bodies_past_the_cap_get_a_json_rpc_error_naming_the_limit_at_once(ws, state):
    """Found by testing from outside: a body past the cap (8.4 MB with the default policy) got a
    bare "Request body too large", and a declared Content-Length of 99999999999 with a few bytes
    sent held the connection 30 s before closing it without an answer, token or not."""
    import socket
    from urllib.parse import urlsplit

    with http_server(ws, state) as (url, _):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            big = b'{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"tally","arguments":{"name":"' + \
                  b"x" * (9 << 20) + b'"}}}'
            refused = await http.post(url, content=big, headers=auth)
            assert refused.status_code == 413, refused.text[:300]
            answer = refused.json()
            assert answer["id"] == 77 and answer["error"]["code"] == -32600, answer
            assert "limits.max_argument_bytes" in answer["error"]["message"] and "nothing was done" in answer["error"]["message"]
            assert (await http.post(url, json=INIT, headers=auth)).status_code == 200  # still serving
        parts = urlsplit(url)
        for authorization, status in ((f"Bearer {token}", b"413"), ("Bearer wrong", b"401")):
            with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
                started = time.monotonic()
                sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: {authorization}\r\n"
                             "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                             "Content-Length: 99999999999\r\n\r\n{}".encode())
                head = sock.recv(65536)
                assert head.startswith(b"HTTP/1.1 " + status), head[:200]
                assert time.monotonic() - started < 5


async def test_http_sessions_are_capped_and_the_refusal_says_what_frees_a_place(ws, state):
    """Found by testing from outside: 6,000 initialize requests, none closed, took the server from
    75 to 322 MB (the SDK's cap is 10,000 sessions, each about 40 KB, ended after 30 min idle)."""
    with http_server(ws, state, CODESPACE_HTTP_MAX_SESSIONS="3") as (url, _):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = []
            for _ in range(3):
                answer = await http.post(url, json=INIT, headers=auth)
                assert answer.status_code == 200
                opened.append(answer.headers["mcp-session-id"])
            refused = await http.post(url, json=INIT, headers=auth)
            assert refused.status_code == 503
            error = refused.json()
            assert error["id"] == 1 and "Too many open MCP sessions: 3" in error["error"]["message"], error
            assert "CODESPACE_HTTP_MAX_SESSIONS" in error["error"]["message"] and "DELETE" in error["error"]["message"]
            closed = await http.delete(url, headers={**auth, "mcp-session-id": opened[0],
                                                     "mcp-protocol-version": "2025-11-25"})
            assert closed.status_code == 200, closed.text
            assert (await http.post(url, json=INIT, headers=auth)).status_code == 200  # a place again


async def test_http_answers_hostile_bodies_with_json_rpc_errors(ws, state):
    """The same refusals as over stdio: nesting too deep, an object as id (the SDK left it
    unanswered), a batch; the server goes on serving."""
    with http_server(ws, state) as (url, _):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=30) as http:
            for body, needle in (
                (b"[" * 100000 + b"]" * 100000, "nests deeper than 64 levels"),
                (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file","arguments":{"path":'
                 + b"[" * 15000 + b"]" * 15000 + b"}}}", "nests deeper than 64 levels"),
                (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', '"id" must be a string or an integer'),
                (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', "batches are not part of MCP"),
            ):
                refused = await http.post(url, content=body, headers=auth)
                assert refused.status_code == 400, refused.text
                error = refused.json()["error"]
                assert refused.json()["id"] is None and error["code"] == -32600 and needle in error["message"]
            ok = await http.post(url, json=INIT, headers=auth)
            assert ok.status_code == 200
            session = {**auth, "mcp-session-id": ok.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            odd = await http.post(url, headers=session, content=json.dumps({
                "jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "tally", "arguments": {"name": "w\udcff"}}}).encode())
            assert odd.status_code == 200, odd.text  # the SDK alone: 400, a bare parse error
            result = odd.json()["result"]
            assert result["isError"] is True and result["_meta"]["codespace/error"]["code"] == "invalid_arguments"
            assert "argument 'name' holds a lone surrogate" in result["content"][0]["text"]
            nameless = await http.post(url, headers=session, json={"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                                                   "params": {"arguments": {}}})
            error = json.loads(nameless.text.split("data: ", 1)[1]) if "data: " in nameless.text else nameless.json()
            assert error["error"]["code"] == -32602 and "params.name: Field required" in error["error"]["data"]


async def test_http_a_request_reusing_the_id_of_one_still_running_is_refused_and_not_run(ws, state):
    """Found by testing from outside: the SDK ran both, and the first caller's POST never got its
    answer. The second is refused with the id named, and the id is free again once answered."""
    with http_server(ws, state, **{ENV_ALLOW: "example,fs"}) as (url, _):
        token = (state / "http-token").read_text().strip()
        auth = {**HEADERS, "Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(timeout=60) as http:
            ok = await http.post(url, json=INIT, headers=auth)
            session = {**auth, "mcp-session-id": ok.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

            def call(name: str, arguments: dict) -> dict:
                return {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": name, "arguments": arguments}}

            def answer(response) -> dict:  # noqa: ANN001 - an httpx response, JSON or one SSE event
                text = response.text
                return json.loads(text.split("data: ", 1)[1].split("\n", 1)[0]) if "data: " in text else response.json()

            slow = asyncio.ensure_future(http.post(url, headers=session, json=call(
                "exec", {"command": "sleep 1; echo first > first.txt", "timeout_ms": 30000})))
            await asyncio.sleep(0.4)
            again = await http.post(url, headers=session, json=call("write_file", {"path": "second.txt", "content": "2"}))
            assert again.status_code == 400, again.text
            error = again.json()["error"]
            assert again.json()["id"] == 5 and error["code"] == -32600, error
            assert "id 5 belongs to a request that has not been answered" in error["message"]
            # The SDK keeps a session's requests by the id's text: "5" is 5 to it (found by the next round).
            text = await http.post(url, headers=session, json={**call("write_file", {"path": "second.txt",
                                                                                    "content": "2"}), "id": "5"})
            assert text.status_code == 400 and text.json()["id"] == "5", text.text
            # Arguments with a lone surrogate are refused without the SDK; a reused id still comes first.
            odd = await http.post(url, headers=session, content=json.dumps(call("write_file", {
                "path": "w\udcff.txt", "content": "2"})).encode())
            assert odd.status_code == 400 and "id 5 belongs to a request" in odd.json()["error"]["message"], odd.text
            first = answer(await asyncio.wait_for(slow, 30))
            assert first["id"] == 5 and first["result"]["isError"] is False, first
            assert (ws / "first.txt").read_text() == "first\n" and not (ws / "second.txt").exists()
            reused = answer(await http.post(url, headers=session, json=call("write_file", {"path": "third.txt",
                                                                                           "content": "3"})))
            assert reused["result"]["isError"] is False and (ws / "third.txt").read_text() == "3"
            # A client that leaves does not free the id of its call, which goes on (found by the next round:
            # the retry ran too).
            leaving = asyncio.ensure_future(http.post(url, headers=session, json={**call(
                "exec", {"command": "sleep 1.5; echo once >> once.txt", "timeout_ms": 30000}), "id": 6}))
            await asyncio.sleep(0.5)
            leaving.cancel()
            await asyncio.sleep(0.3)
            retry = await http.post(url, headers=session, json={**call(
                "exec", {"command": "echo retry >> once.txt", "timeout_ms": 30000}), "id": 6})
            assert retry.status_code == 400 and "id 6 belongs to a request" in retry.json()["error"]["message"]
            for _ in range(100):
                if (ws / "once.txt").exists():
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
            assert (ws / "once.txt").read_text() == "once\n"
            freed = answer(await http.post(url, headers=session, json={**call("write_file", {
                "path": "fourth.txt", "content": "4"}), "id": 6}))
            assert freed["result"]["isError"] is False


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


async def test_an_operator_token_file_is_hidden_from_the_agent(ws, state):
    """--token-file may name a file the policy would let the agent read (here: inside the
    workspace); the server hides it from the file tools and from commands."""
    token_file = ws / "secret-token"
    token_file.write_text("operator-token-in-the-workspace\n")
    policy = state.parent / "sandboxed.toml"
    policy.write_text('[sandbox]\nmode = "required"\n')
    with http_server(ws, state, "--token-file", str(token_file), "--policy", str(policy), **{ENV_ALLOW: ""}) as (url, _):
        headers = {"Authorization": "Bearer operator-token-in-the-workspace"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                refused = await call_error(client, "read_file", {"path": "secret-token"})
                assert "HTTP bearer token file" in refused["message"], refused
                ran = await call_ok(client, "exec", {"command": "cat secret-token; echo END"})
                assert "operator-token" not in ran["output"] and "END" in ran["output"], ran


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


def _raw_session(ws, state, env_extra):
    proc = subprocess.Popen(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=subprocess_env(**{ENV_ALLOW: "example", **env_extra}),
    )

    def exchange(message: dict, *, wait: bool = True) -> dict | None:
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline()) if wait else None

    return proc, exchange


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_direct_tool_calls_match_the_sdk_path(ws, state, tmp_path, era):
    """The stdio fast path must answer exactly what the SDK path answers."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}} if era == "modern" else None
    calls = [
        ("tally", {"name": "cmp", "operation_id": "same-key"}),
        ("tally", {"name": "cmp", "operation_id": "same-key"}),  # replayed
        ("read_file", {"path": "/proc/1/environ"}),  # refused
        ("no_such_tool", {}),
        ("tally", {"name": ["bad"]}),  # invalid arguments
        ("workspace_info", {}),
    ]
    answers = {}
    for direct in ("1", "0"):
        workspace = tmp_path / f"ws-{direct}"
        workspace.mkdir()
        proc, exchange = _raw_session(workspace, tmp_path / f"state-{direct}", {"CODESPACE_DIRECT_CALLS": direct})
        try:
            if era == "legacy":
                exchange(INIT)
                exchange({"jsonrpc": "2.0", "method": "notifications/initialized"}, wait=False)
            replies = []
            for i, (name, arguments) in enumerate(calls):
                params = {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
                reply = exchange({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": params})
                replies.append(reply)
            answers[direct] = replies
        finally:
            proc.stdin.close()
            proc.wait(timeout=20)

    def normalise(reply: dict) -> dict:
        text = re.sub(r"op-[0-9a-f]{12}-[0-9a-f]{10}", "op-X", json.dumps(reply))
        # Per-process facts in workspace_info: each command's cgroup name, and whether the
        # sandbox's warm helper had started yet (the paths differ in timing, not in kind).
        text = re.sub(r"cs-[0-9a-f]+-\d+-\d+", "cs-X", text)
        text = re.sub(r"fast path: [^\"]*", "fast path: X", text)
        for direct in ("1", "0"):
            for name in ("ws", "state"):
                text = text.replace(str((tmp_path / f"{name}-{direct}").resolve()), name.upper())
                text = text.replace(str(tmp_path / f"{name}-{direct}"), name.upper())
        return json.loads(text)

    for fast, sdk in zip(answers["1"], answers["0"], strict=True):
        assert normalise(fast) == normalise(sdk), _differences(normalise(fast), normalise(sdk))
    assert answers["1"][1]["result"]["structuredContent"]["replayed"] is True
    assert answers["1"][2]["result"]["isError"] is True


def _differences(a, b, at: str = "") -> list[str]:
    """Where two answers differ (the assertion's message: workspace_info is long)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str) for d in _differences(a.get(key), b.get(key), f"{at}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{at}[{i}]")]
    if isinstance(a, str) and isinstance(b, str) and a.startswith("{") and b.startswith("{"):
        try:
            return _differences(json.loads(a), json.loads(b), at + "(text)")
        except ValueError:
            pass
    return [] if a == b else [f"{at}: {str(a)[:300]!r} != {str(b)[:300]!r}"]


def test_direct_calls_report_progress_and_honour_cancellation(ws, state):
    proc, exchange = _raw_session(ws, state, {})
    try:
        exchange(INIT)
        exchange({"jsonrpc": "2.0", "method": "notifications/initialized"}, wait=False)
        exchange({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "tally", "arguments": {"name": "prog", "sleep_ms": 150}, "_meta": {"progressToken": "tok"}}},
            wait=False)
        messages = [json.loads(proc.stdout.readline()) for _ in range(4)]
        progress = [m for m in messages if m.get("method") == "notifications/progress"]
        assert [m["params"]["progress"] for m in progress] == [0, 1, 2]
        assert all(m["params"]["progressToken"] == "tok" for m in progress)
        assert messages[-1]["id"] == 5 and messages[-1]["result"]["structuredContent"]["count"] == 1
        marker = ws / "spin"
        exchange({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                  "params": {"name": "spin", "arguments": {"marker": str(marker)}}}, wait=False)
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        exchange({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 6}}, wait=False)
        while marker.read_text() != "stopped" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marker.read_text() == "stopped"
        after = exchange({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "tally", "arguments": {"name": "after"}}})
        assert after["id"] == 7  # no answer was sent for the cancelled request 6
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)


def test_direct_answers_encode_like_json_and_survive_lone_surrogates():
    from codespace.transports.wire import encode as _encode

    message = {"jsonrpc": "2.0", "id": 1, "result": {"text": "é € \u2028 \x00 \"q\"", "n": [1, 2.5, None, True]}}
    assert _encode(message) == json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    odd = _encode({"text": "a\udc80b"})  # UTF-8 cannot carry it: escaped, still valid JSON
    assert json.loads(odd) == {"text": "a\udc80b"}

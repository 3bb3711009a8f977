"""A tool call is answered the same on every road it can take.

The roads: stdio's fast path (the front answers), stdio through the SDK
(``CODESPACE_DIRECT_CALLS=0``), streamable HTTP, and an in-process session. All of
them reach the gateway through ``codespace.transports.calls``; the first writes
the SDK's envelope itself, so this is what keeps it honest. stdio and HTTP are
compared byte for byte (operation ids, minted per process, masked); the in-process
road never becomes bytes, so its results are compared as JSON.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from codespace.plugins import ENV_ALLOW
from codespace.server import build_server

from .conftest import codespace_cmd, http_serving, subprocess_env

MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientInfo": {"name": "roads", "version": "0"},
               "io.modelcontextprotocol/clientCapabilities": {}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "roads", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
PLUGINS = "example,fs"  # fs: the file backend, whose errors are a tool's own
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

CALLS = {
    "success": ("check_command", {"argv": ["ls", "-l"]}),
    "tool error": ("read_file", {"path": "missing.txt"}),
    "refusal": ("read_file", {"path": "/proc/1/environ"}),
    "validation error": ("tally", {"name": ["not", "a", "string"]}),
    # Refused by the gateway before the SDK could parse it: HTTP answers it ahead of the SDK,
    # as the stdio fast path does; stdio through the SDK gets a JSON-RPC error instead.
    "lone surrogate": ("tally", {"name": "w\udcff"}),
}
SDK_CANNOT_PARSE = {"lone surrogate"}
FIRST_ID = 10
OPERATION_ID = re.compile(rb"op-[0-9a-f]{12}-[0-9a-f]{10}")


def _request(i: int, name: str, arguments: dict, era: str) -> dict:
    params = {"name": name, "arguments": arguments, **({"_meta": MODERN_META} if era == "modern" else {})}
    return {"jsonrpc": "2.0", "id": FIRST_ID + i, "method": "tools/call", "params": params}


def _masked(reply: bytes) -> bytes:
    return OPERATION_ID.sub(b"op-X", reply)


def _over_stdio(ws: Path, state: Path, era: str, direct: str) -> list[bytes]:
    lines = [INIT, INITIALIZED] if era == "legacy" else []
    lines += [_request(i, name, arguments, era) for i, (name, arguments) in enumerate(CALLS.values())]
    done = subprocess.run(
        [*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(state)],
        input=b"".join(json.dumps(line).encode() + b"\n" for line in lines), capture_output=True, timeout=120,
        env=subprocess_env(**{ENV_ALLOW: PLUGINS, "CODESPACE_DIRECT_CALLS": direct}),
    )
    by_id = {json.loads(line).get("id"): line for line in done.stdout.splitlines()}
    return [by_id[FIRST_ID + i] for i in range(len(CALLS))]


def _over_http(ws: Path, state: Path, era: str) -> list[bytes]:
    argv = [*codespace_cmd(), "serve", "--transport", "http", "--port", "0", "--workspace", str(ws),
            "--state-dir", str(state)]
    replies = []
    with http_serving(argv, subprocess_env(**{ENV_ALLOW: PLUGINS})) as (url, _), httpx2.Client(timeout=60) as http:
        headers = {**HEADERS, "Authorization": f"Bearer {(state / 'http-token').read_text().strip()}"}
        if era == "legacy":
            opened = http.post(url, json=INIT, headers=headers)
            headers.update({"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"})
            http.post(url, json=INITIALIZED, headers=headers)
        for i, (name, arguments) in enumerate(CALLS.values()):
            extra = {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name} \
                if era == "modern" else {}
            answer = http.post(url, content=json.dumps(_request(i, name, arguments, era)).encode(),
                               headers={**headers, **extra})
            assert answer.status_code == 200, answer.text
            body = answer.content
            if answer.headers["content-type"].startswith("text/event-stream"):
                body = next(line[len(b"data: "):] for line in body.splitlines() if line.startswith(b"data: "))
            replies.append(body)
    return replies


def _in_process(make_app, era: str) -> list[dict]:
    async def calls() -> list[dict]:
        async with Client(build_server(make_app(plugins=tuple(PLUGINS.split(",")))), mode="auto" if era == "modern" else "legacy") as client:
            return [(await client.call_tool(name, arguments)).model_dump(by_alias=True, mode="json",
                                                                         exclude_unset=True)
                    for name, arguments in CALLS.values()]

    return anyio.run(calls)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_every_road_gives_the_same_tool_result_bytes(ws, state, make_app, era):
    roads = {
        "stdio, fast path": _over_stdio(ws, state, era, direct="1"),
        "stdio, through the SDK": _over_stdio(ws, state, era, direct="0"),
        "HTTP": _over_http(ws, state, era),
    }
    sdk = [_masked(reply) for reply in roads.pop("stdio, through the SDK")]
    fast = [_masked(reply) for reply in roads["stdio, fast path"]]
    for road, replies in roads.items():
        for kind, reply, from_sdk, from_fast in zip(CALLS, replies, sdk, fast, strict=True):
            expected = from_fast if kind in SDK_CANNOT_PARSE else from_sdk
            assert _masked(reply) == expected, f"{kind} over {road}:\n{reply!r}\n!=\n{expected!r}"

    results = [json.loads(reply)["result"] for reply in fast]
    assert [r["isError"] for r in results] == [False, True, True, True, True]
    assert [r.get("_meta", {}).get("codespace/error", {}).get("code") for r in results] == \
        [None, "not_found", "refused", "invalid_arguments", "invalid_arguments"]
    in_process = json.loads(_masked(json.dumps(_in_process(make_app, era)).encode()))
    for kind, got, expected in zip(CALLS, in_process, results, strict=True):
        assert got == expected, f"{kind} in process"

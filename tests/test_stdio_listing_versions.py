"""A start without a kept listing builds the ``tools/list`` answer itself (codespace.transports.tool_wire, not
the SDK's server): for every classic protocol version a client may negotiate, the bytes are the
SDK's, and nothing of the SDK's server is imported."""

from __future__ import annotations

import re

import pytest

from .test_stdio_front import INITIALIZED, replies, serve_lines


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_a_cold_listing_is_the_sdks_for_every_classic_version(tmp_path, version):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    session = [init, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
               {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}]
    cold = {"CODESPACE_LISTING_CACHE": "0"}
    sdk = replies(serve_lines(tmp_path, "sdk", session, direct="0", extra_env=cold))
    done = serve_lines(tmp_path, "front", session, extra_env=cold, python_flags=("-X", "importtime"))
    front = replies(done)
    assert front[2] == sdk[2] and front[3] == sdk[3]  # the second from what the first built
    assert b'"tools":[' in front[2]
    assert not re.search(rb"\| +(mcp|starlette|uvicorn)(\.|\n)", done.stderr), "the SDK's server was imported"

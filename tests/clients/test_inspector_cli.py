"""The MCP Inspector's CLI mode (``mcp-inspector --cli``, @modelcontextprotocol/inspector 2.x, which
runs offline once installed), over stdio and over Streamable HTTP with the bearer token as a header.

What a user of the Inspector sees: a success prints the result and exits 0; a tool error prints
the result (isError, the message as text, no structured content) and exits 5. The package comes
from ``CODESPACE_NODE_MODULES`` like the SDK tests; skipped without it, failed in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_typescript_sdk import IN_CI, _http_server, _node_modules, _server_argv

TOOL_ERROR_EXIT = 5  # the Inspector CLI's exit status when a tool returned isError


def _inspector() -> Path:
    modules = _node_modules()
    launcher = modules / ".bin" / "mcp-inspector" if modules else None
    missing = None
    if shutil.which("node") is None:
        missing = "node is not installed"
    elif launcher is None or not launcher.exists():
        missing = "@modelcontextprotocol/inspector is not installed in CODESPACE_NODE_MODULES"
    if missing is not None:
        if IN_CI:
            pytest.fail(f"CI must run the Inspector CLI test, but {missing}; .ci/run installs it")
        pytest.skip(missing)
    assert launcher is not None
    return launcher


def _cli(launcher: Path, target: list[str], *args: str) -> tuple[int, dict]:
    done = subprocess.run([str(launcher), "--cli", *target, *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    for out in (done.stdout, done.stderr):  # a result on stdout; the Inspector's own errors on stderr
        try:
            return done.returncode, json.JSONDecoder().raw_decode(out.lstrip())[0]
        except ValueError:
            continue
    raise AssertionError(f"no JSON from the Inspector (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _text(result: dict) -> str:
    return "\n".join(c["text"] for c in result.get("content", []) if c.get("type") == "text")


def _exercise(launcher: Path, target: list[str]) -> None:
    code, listing = _cli(launcher, target, "--method", "tools/list")
    assert code == 0 and {"exec", "read_file", "apply_patch"} <= {t["name"] for t in listing["tools"]}

    code, wrote = _cli(launcher, target, "--method", "tools/call", "--tool-name", "write_file",
                       "--tool-arg", "path=seen.txt", "content=seen by the inspector")
    assert code == 0 and wrote["isError"] is False and wrote["structuredContent"]["created"] is True

    code, read = _cli(launcher, target, "--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "path=seen.txt")
    assert code == 0 and _text(read) == "seen by the inspector"

    code, missing = _cli(launcher, target, "--method", "tools/call", "--tool-name", "read_file",
                         "--tool-arg", "path=missing.txt")
    assert code == TOOL_ERROR_EXIT and missing["isError"] is True
    assert "structuredContent" not in missing
    assert "missing.txt" in _text(missing) and "No such file" in _text(missing)

    code, ran = _cli(launcher, target, "--method", "tools/call", "--tool-name", "exec", "--tool-arg", "command=echo hi")
    assert code == 0 and _text(ran).startswith("hi\n[exit 0 in ") and ran["structuredContent"]["exit_code"] == 0


def test_inspector_cli_over_stdio(ws, state):
    _exercise(_inspector(), _server_argv(ws, state))


def test_inspector_cli_over_http_with_the_bearer_header(ws, state):
    launcher = _inspector()
    with _http_server(ws, state) as (url, token):
        _exercise(launcher, [url, "--transport", "http", "--header", f"Authorization: Bearer {token}"])
        code, refused = _cli(launcher, [url, "--transport", "http"], "--method", "tools/list")
        assert code != 0 and "error" in refused  # no token: the Inspector is refused (it offers OAuth)

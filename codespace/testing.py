"""Helpers for tests of CodeSpace and of its plugins: a real in-process MCP session.

    async with connect(tmp_path / "ws", state_dir=tmp_path / "state", mode="legacy") as client:
        result = await call_ok(client, "read_file", {"path": "a.txt"})
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client

from .app import App
from .server import build_server

MODES = ("auto", "legacy")


def build_app(
    workspace: str | os.PathLike[str],
    *,
    state_dir: str | os.PathLike[str],
    policy: str | None = None,
    plugins: tuple[str, ...] | None = None,
) -> App:
    """An App on ``workspace``; ``policy`` is TOML text; ``plugins`` limits which entry points load
    (None: all installed)."""
    policy_path = None
    if policy is not None:
        policy_path = Path(state_dir).parent / f"policy-{os.getpid()}-{id(policy)}.toml"
        policy_path.write_text(policy)
    env = dict(os.environ)
    env.pop("CODESPACE_PLUGINS_BLOCK", None)
    if plugins is not None:
        env["CODESPACE_PLUGINS_ALLOW"] = ",".join(plugins) or "(none)"
    return App.build(workspace, policy=policy_path, state_dir=state_dir, env=env)


@asynccontextmanager
async def connect(app_or_workspace: App | str | os.PathLike[str], *, mode: str = "auto", **kwargs: Any) -> AsyncIterator[Client]:
    app = app_or_workspace if isinstance(app_or_workspace, App) else build_app(app_or_workspace, **kwargs)
    async with Client(build_server(app), mode=mode) as client:
        yield client


ERROR_META_KEY = "codespace/error"  # as codespace.gateway sends it


def structured(result: Any) -> dict[str, Any]:
    """A success's structured content; for an error, ``{"error": ...}`` from its ``_meta``
    (error results carry no structured content: see codespace.gateway.Outcome)."""
    if result.is_error:
        assert result.structured_content is None, "an error result must not carry structuredContent"
        return {"error": (result.meta or {})[ERROR_META_KEY]}
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def call_ok(client: Client, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(name, dict(arguments or {}))
    assert not result.is_error, f"{name} failed: {result.content[0].text}"
    return structured(result)


async def call_error(client: Client, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The error object of a failing call (asserts that it failed, carries no structured
    content, and shows the agent the error's message as its text)."""
    result = await client.call_tool(name, dict(arguments or {}))
    assert result.is_error, f"{name} unexpectedly succeeded: {result.content[0].text[:500]}"
    data = structured(result)
    assert data["error"]["message"] == result.content[0].text
    return data["error"]


def server_pids(state_dir: str | os.PathLike[str]) -> list[int]:
    """Processes running ``codespace serve`` on ``state_dir`` (to kill one mid-operation)."""
    wanted = os.fsencode(str(state_dir))
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and wanted in cmdline:
            pids.append(int(entry))
    return pids


# Fixtures for test suites (import them into a conftest.py:
# ``from codespace.testing import anyio_backend, mode, state, ws``).
try:
    import pytest
except ImportError:  # pragma: no cover - the helpers above work without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def anyio_backend() -> str:
        """Run ``@pytest.mark.anyio`` tests on asyncio."""
        return "asyncio"

    @pytest.fixture(params=MODES)
    def mode(request: pytest.FixtureRequest) -> str:
        """Each in-process MCP test once per client mode ("auto", "legacy")."""
        return request.param

    @pytest.fixture
    def ws(tmp_path: Path) -> Path:
        """An empty workspace directory (real path: no symlinked temp dirs in assertions)."""
        path = tmp_path / "ws"
        path.mkdir()
        return Path(os.path.realpath(path))

    @pytest.fixture
    def state(tmp_path: Path) -> Path:
        """The state directory, beside the workspace (not yet created)."""
        return tmp_path / "state"

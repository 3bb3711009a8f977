from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
EXAMPLE_PLUGINS = TESTS / "plugins"
REPO = TESTS.parent


# The fixtures themselves (ws, state, make_app, ...) come from codespace.testing, a pytest plugin.
@pytest.fixture
def plugin_paths() -> tuple[Path, ...]:
    return (EXAMPLE_PLUGINS,)


@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("example",)


@pytest.fixture
def example_plugins(discoverable_plugins: tuple[Path, ...]) -> Path:
    """Make the test plugins under tests/plugins discoverable as entry points."""
    return EXAMPLE_PLUGINS


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a server subprocess that sees the test plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE_PLUGINS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def codespace_cmd() -> list[str]:
    return [sys.executable, "-m", "codespace"]


@contextmanager
def http_serving(argv: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """A ``codespace serve --transport http --port 0`` subprocess: its URL once it listens."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError(f"the HTTP server exited early: {proc.wait()}")
            match = re.search(r"listening on (http://\S+/mcp)", line)
            url = match.group(1) if match else None
        assert url, "the HTTP server did not announce its address"
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        assert proc.stdout.read() == ""  # nothing on stdout, ever

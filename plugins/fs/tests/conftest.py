from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from codespace_fs.backend import FsBackend
from codespace_fs.resolve import MODE_ENV

RESOLVERS = ("openat2", "openat")


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernel's openat2 and the component-by-component fallback must behave alike."""
    monkeypatch.setenv(MODE_ENV, request.param)
    return request.param


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding things the agent must never reach."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("TOP SECRET\n")
    (path / "sub").mkdir()
    (path / "sub" / "deep.txt").write_text("deep secret\n")
    return path


# ws, state, make_app, make_workspace, ... come from codespace.testing, a pytest plugin.
@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("fs",)


@pytest.fixture
def backend_factory(make_workspace):
    """The backend alone, without the gateway: it must be safe on its own."""

    def make(policy: str | None = None, mode: str | None = None) -> FsBackend:
        return FsBackend(make_workspace(policy), mode or os.environ.get(MODE_ENV, "openat2"))  # type: ignore[arg-type]

    return make


@pytest.fixture
def digest():
    """``digest(path)``: every entry under a tree with its content hash, to prove nothing changed."""
    return tree_digest


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` with its content hash (or link text): to prove nothing changed."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "dir" if os.path.isdir(full) else "other"
    return out

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from codespace_fs.backend import FsBackend
from codespace_fs.resolve import MODE_ENV

from codespace.testing import anyio_backend, build_app, mode, state, ws  # noqa: F401 - fixtures
from codespace.workspace import Workspace

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


@pytest.fixture
def app_factory(ws: Path, state: Path):
    def make(policy: str | None = None):
        return build_app(ws, state_dir=state, policy=policy, plugins=("fs",))

    return make


@pytest.fixture
def backend_factory(ws: Path, state: Path, tmp_path: Path):
    """The backend alone, without the gateway: it must be safe on its own."""

    def make(policy: str | None = None, mode: str | None = None) -> FsBackend:
        policy_path = None
        if policy is not None:
            policy_path = tmp_path / f"policy-{abs(hash(policy))}.toml"
            policy_path.write_text(policy)
        workspace = Workspace.open(ws, policy_path=policy_path, state_dir=state)
        return FsBackend(workspace, mode or os.environ.get(MODE_ENV, "openat2"))  # type: ignore[arg-type]

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

from __future__ import annotations

from pathlib import Path

import pytest

from codespace.testing import anyio_backend, build_app, mode  # noqa: F401 - fixtures


@pytest.fixture
def app(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return build_app(ws, state_dir=tmp_path / "state", plugins=("pty",))

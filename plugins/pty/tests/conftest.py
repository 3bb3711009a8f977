from __future__ import annotations

from pathlib import Path

import pytest

from codespace.testing import MODES, build_app


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def app(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return build_app(ws, state_dir=tmp_path / "state", plugins=("pty",))

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_PLUGINS = TESTS / "plugins"
TEST_FS = "patch_testfs"

REAL_FS = importlib.util.find_spec("codespace_fs") is not None


# ws, state, make_app, ... come from codespace.testing, a pytest plugin.
@pytest.fixture
def plugin_paths() -> tuple[Path, ...]:
    return (TEST_PLUGINS,)


@pytest.fixture(params=[pytest.param(TEST_FS, marks=pytest.mark.in_process), "fs"])
def fs_plugin(request: pytest.FixtureRequest, discoverable_plugins: tuple[Path, ...]) -> str:
    """The FileSystem backend under the patcher: the tests' own, and the real
    codespace-fs when it is installed. The tests' own is a test-only plugin a worker
    process cannot load: its runs skip when the suite runs with a worker."""
    if request.param == "fs" and not REAL_FS:
        pytest.skip("codespace-fs is not installed in this environment")
    return request.param


@pytest.fixture
def enabled_plugins(fs_plugin: str) -> tuple[str, ...]:
    return ("patch", fs_plugin)


@pytest.fixture
def test_plugins(discoverable_plugins: tuple[Path, ...]) -> Path:
    return TEST_PLUGINS


def write(root: Path, files: dict[str, bytes | str]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)


def patch_of(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])

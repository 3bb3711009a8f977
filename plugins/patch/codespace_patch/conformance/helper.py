"""Running CodeSpace's helper executable the way the pin check compares it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

from ..spawn import helper_command

from .oracle import Outcome

# The tests' file-system backend, for a run without codespace-fs (a checkout or an editable install).
TEST_PLUGINS = Path(__file__).resolve().parents[2] / "tests" / "plugins"


def real_fs_installed() -> bool:
    return importlib.util.find_spec("codespace_fs") is not None


def helper_argv(backend: str = "auto") -> list[str]:
    """``backend``: 'real' (codespace-fs), 'test' (the tests' backend), or 'auto'
    (the real one when installed)."""
    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    extra = [] if backend == "real" else [str(TEST_PLUGINS)]
    return helper_command(extra)


def helper_env(state_dir: str, home: str, backend: str = "auto", mode: str = "upstream") -> dict[str, str]:
    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    env = {
        "HOME": home,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CODESPACE_STATE_DIR": state_dir,
        "CODESPACE_PATCH_MODE": mode,
        "CODESPACE_PLUGINS_ALLOW": "fs,patch" if backend == "real" else "patch_testfs,patch",
    }
    return env


def run_helper(argv: list[str], cwd: str, patch: str | None, env: dict[str, str], stdin: bytes | None = None) -> Outcome:
    args = argv + ([patch] if patch is not None else [])
    done = subprocess.run(args, cwd=cwd, capture_output=True, timeout=120, env=env,
                          input=stdin if stdin is not None else b"")
    return Outcome(done.returncode, done.stdout, done.stderr)

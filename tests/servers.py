"""Real ``codespace serve`` subprocesses for hostile tests: as root, or as an unprivileged
user (``setpriv``), with HOME pointed at a temporary directory, never the real one."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mcp import StdioServerParameters

UNPRIVILEGED = 1000  # any uid works: setpriv needs no passwd entry

# `python -c` entry that sees this checkout's venv even when the venv's interpreter lives
# where an unprivileged user cannot reach it (its site directory is added by hand).
_ENTRY = "import site, sys; [site.addsitedir(p) for p in {sites!r}]; from codespace.cli import main; sys.exit(main())"


def _sites() -> list[str]:
    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def _runs_as(uid: int, python: str) -> bool:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return False
    # Through a shell: a program setpriv itself executes may be one the user's own children cannot.
    probe = subprocess.run(
        [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/bin/sh", "-c", 'exec "$@"', "probe",
         python, "-I", "-c", f"import site, sys; [site.addsitedir(p) for p in {_sites()!r}]; import codespace, pydantic, mcp"],
        capture_output=True, timeout=60,
    )
    return probe.returncode == 0


def unprivileged_python() -> str:
    """An interpreter the unprivileged user can run that loads this checkout (skips if none)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a server as another user")
    candidates = [sys.executable, os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]
    for python in candidates:
        if python and os.path.exists(python) and _runs_as(UNPRIVILEGED, python):
            return python
    pytest.skip(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that uid {UNPRIVILEGED} can run loads this checkout")


def shared_tmp(prefix: str, uid: int | None = None) -> Path:
    """A directory under /tmp (pytest's tmp_path is 0700 root), owned by ``uid``."""
    path = Path(os.path.realpath(tempfile.mkdtemp(prefix=prefix, dir="/tmp")))
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def make_dir(path: Path, uid: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def serve_params(ws: Path, state: Path, home: Path, *, uid: int | None = None, policy: Path | None = None,
                 prefix: list[str] = (), **env: str) -> StdioServerParameters:  # type: ignore[assignment]
    """A stdio server on ``ws``; ``uid``: run it as that user; ``prefix``: argv run first (as root)."""
    args = ["serve", "--workspace", str(ws), "--state-dir", str(state)]
    if policy is not None:
        args += ["--policy", str(policy)]
    if uid is None:
        command = [sys.executable, "-m", "codespace", *args]
    else:
        command = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                   unprivileged_python(), "-I", "-c", _ENTRY.format(sites=_sites()), *args]
    command = [*prefix, *command]
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    base.update({"HOME": str(home), "CODESPACE_PLUGINS_BLOCK": "example"}, **env)
    base.pop("XDG_STATE_HOME", None)
    return StdioServerParameters(command=command[0], args=command[1:], env=base)


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False

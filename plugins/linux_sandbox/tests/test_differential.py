"""The same probe under the pinned ``codex sandbox`` (0.171.0) and under ours, row by row.

Every row must agree, except those listed in DIFFERENCES with the value each side gives
and why (README.md, "Differential against codex sandbox", repeats the table).
Set CODESPACE_CODEX_BINARY to the codex executable; the default is where
docs/upstream-0.171.0.md says it is cached.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from codespace_linux_sandbox.backend import interpreter
from conftest import PROBE, READ_ONLY, WORKSPACE_WRITE, make_env

CODEX = Path(os.environ.get(
    "CODESPACE_CODEX_BINARY",
    Path.home() / ".cache/codespace/codex-0.171.0/package/vendor/x86_64-unknown-linux-musl/bin/codex",
))

_PRIVATE_TMP = "CodeSpace's policy does not make /tmp writable; the command gets a private tmpfs instead"
_MASK = "the missing-name mask is a mode-0555 tmpfs (no remount: 6x cheaper in bwrap), so EACCES not EROFS"
_LANDLOCK_ERRNO = "Landlock refuses with EACCES where a read-only mount gives EROFS"
_SPLIT = "Landlock cannot take rights back inside the workspace root, so the root is split around protected names"
_LANDLOCK_TMP = "no mount namespace: the host's /tmp stays read-only, the command gets a private TMPDIR"
_NO_MASK = "no mount namespace: the missing name is refused directly (mkdir fails), so the path stays missing"

DIFFERENCES: dict[tuple[str, str], dict[str, tuple[str, str, str]]] = {
    ("bubblewrap", "read-only"): {"write_tmp": ("ok", "EROFS", _PRIVATE_TMP)},
    ("bubblewrap", "workspace-write"): {"create_codex": ("EACCES", "EROFS", _MASK)},
    ("landlock", "read-only"): {
        "write_outside": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "write_cwd": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "write_cwd_subdir": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "write_tmp": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "write_git": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "mkdir_codex": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
    },
    ("landlock", "workspace-write"): {
        "write_outside": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "write_cwd": ("EACCES", "ok", _SPLIT),
        "write_tmp": ("EACCES", "ok", _LANDLOCK_TMP),
        "write_git": ("EACCES", "EROFS", _LANDLOCK_ERRNO),
        "create_codex": ("ENOENT", "EROFS", _NO_MASK),
        "mkdir_codex": ("EACCES", "EEXIST", _NO_MASK),
    },
}


_HOST_ROOT = ("run as root, codex leaves the command host uid 0 (user namespace mapped to 0) and bwrap leaves "
              "/proc/sys writable; ours runs as an unprivileged uid and binds /proc/sys read-only")
if os.geteuid() == 0:
    for _rows in DIFFERENCES.values():
        _rows["open_sysctl"] = ("EACCES", "ok", _HOST_ROOT)


def codex_probe(env, policy: str) -> dict[str, str]:
    home = env.base / "codex-home"  # codex refuses to create its helper links under /tmp
    home.mkdir(exist_ok=True)
    extra = ["-c", 'sandbox_mode="workspace-write"'] if policy == "workspace-write" else []
    run = subprocess.run(
        [str(CODEX), "sandbox", *extra, "--", interpreter(), "-I", "-S", str(PROBE), str(env.outside)],
        cwd=env.ws, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, capture_output=True, timeout=120, check=False,
    )
    if run.returncode != 0:
        pytest.skip(f"codex sandbox cannot run the probe here: {run.stderr.decode(errors='replace')[-300:]}")
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def codex_available() -> None:
    if not os.access(CODEX, os.X_OK):
        pytest.skip(f"the pinned codex binary is not at {CODEX} (npm pack @openai/codex@0.171.0-linux-x64; "
                    "see docs/upstream-0.171.0.md) — set CODESPACE_CODEX_BINARY")


@pytest.mark.parametrize("policy", ["read-only", "workspace-write"])
def test_probe_agrees_with_codex_row_by_row(base, engine, policy, codex_available):
    ours_env = make_env(_fresh(base, "ours"), engine, READ_ONLY if policy == "read-only" else WORKSPACE_WRITE)
    codex_env = make_env(_fresh(base, "codex"), engine, READ_ONLY if policy == "read-only" else WORKSPACE_WRITE)
    ours = ours_env.probe()
    theirs = codex_probe(codex_env, policy)
    assert set(ours) == set(theirs)
    expected_differences = DIFFERENCES[(engine, policy)]
    for row in sorted(ours):
        if row in expected_differences:
            our_value, their_value, _why = expected_differences[row]
            assert (ours[row], theirs[row]) == (our_value, their_value), row
        else:
            assert ours[row] == theirs[row], f"{row}: ours {ours[row]!r}, codex {theirs[row]!r}"


def _fresh(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir()
    return path

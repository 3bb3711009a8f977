"""The same probe under the pinned ``codex sandbox`` (0.171.0) and under ours, row by row.

Every row must agree, except those listed in codespace_linux_sandbox.pin_listed with the value each side gives
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
from codespace_linux_sandbox import pin_listed
from codespace_linux_sandbox.backend import interpreter
from conftest import PROBE, READ_ONLY, WORKSPACE_WRITE, make_env

CODEX = Path(os.environ.get(
    "CODESPACE_CODEX_BINARY",
    Path.home() / ".cache/codespace/codex-0.171.0/package/vendor/x86_64-unknown-linux-musl/bin/codex",
))

def expected_differences(engine: str, policy: str) -> dict[str, tuple[str, str, str]]:
    """The listed rows (codespace_linux_sandbox.pin_listed: the pin check reports the same ones)."""
    return pin_listed.probe_differences(engine, policy)


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
    listed = expected_differences(engine, policy)
    for row in sorted(ours):
        if row in listed:
            our_value, their_value, _why = listed[row]
            assert (ours[row], theirs[row]) == (our_value, their_value), row
        else:
            assert ours[row] == theirs[row], f"{row}: ours {ours[row]!r}, codex {theirs[row]!r}"


def _fresh(base: Path, name: str) -> Path:
    path = base / name
    path.mkdir()
    return path

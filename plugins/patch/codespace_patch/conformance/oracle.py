"""The released Codex binary of the pin (fetched and cached by the core's
:func:`codespace.contract.codex_binary`) and how the conformance run drives it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from codespace.contract import OracleUnavailable, codex_binary

PIN_VERSION = "0.171.0"

__all__ = ["PIN_VERSION", "OracleUnavailable", "Outcome", "ensure_oracle", "run_oracle"]


def ensure_oracle(version: str = PIN_VERSION, *, fetch: bool = True, log: Callable[[str], None] = print) -> Path:
    """Path to the binary of ``version``, fetching it into the cache when missing."""
    return codex_binary(version, fetch=fetch, log=log)


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: bytes
    stderr: bytes


def run_oracle(binary: Path, cwd: str, patch: str, home: str) -> Outcome:
    done = subprocess.run([str(binary), "--codex-run-as-apply-patch", patch], cwd=cwd, capture_output=True,
                          timeout=60, env={"HOME": home, "PATH": "/usr/bin:/bin"})
    return Outcome(done.returncode, done.stdout, done.stderr)

"""The released Codex binary of the pin, fetched with ``npm pack`` and cached.

``npm pack @openai/codex@<version>-linux-x64`` downloads the platform package
(about 170 MB) into the cache; only the ``codex`` executable is extracted from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

PIN_VERSION = "0.171.0"
NPM_SPEC = f"@openai/codex@{PIN_VERSION}-linux-x64"
MEMBER = "package/vendor/x86_64-unknown-linux-musl/bin/codex"
VERSION_TEXT = f"codex-cli {PIN_VERSION}"


class OracleUnavailable(Exception):
    pass


def cache_dir(version: str = PIN_VERSION) -> Path:
    base = os.environ.get("CODESPACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "codespace")
    return Path(base) / f"codex-{version}"


def _version_of(binary: Path) -> str:
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                              env={"HOME": home, "PATH": "/usr/bin:/bin"})
    return done.stdout.strip()


def ensure_oracle(version: str = PIN_VERSION, *, fetch: bool = True, log=print) -> Path:  # noqa: ANN001
    """Path to the pinned binary, fetching it into the cache when missing."""
    cache = cache_dir(version)
    binary = cache / MEMBER
    if binary.is_file() and _version_of(binary) == f"codex-cli {version}":
        return binary
    if not fetch:
        raise OracleUnavailable(f"the pinned codex binary is not in the cache ({binary}) and fetching is off")
    npm = shutil.which("npm")
    if npm is None:
        raise OracleUnavailable("npm is not installed: it is needed to fetch the pinned codex binary "
                                f"(npm pack @openai/codex@{version}-linux-x64)")
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"@openai/codex@{version}-linux-x64"
    log(f"pin check: fetching {spec} with npm pack into {cache} (about 170 MB)...")
    # Few, short retries: without a network the check must fail in seconds, not minutes.
    done = subprocess.run([npm, "pack", spec, "--pack-destination", str(cache), "--fetch-retries=2",
                           "--fetch-retry-mintimeout=2000", "--fetch-retry-maxtimeout=10000"],
                          cwd=cache, capture_output=True, text=True, timeout=1800)
    (cache / "pack.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise OracleUnavailable(
            f"npm pack {spec} failed (exit {done.returncode}); is the npm registry reachable? "
            f"Last output: {(done.stderr or done.stdout).strip()[-500:]}"
        )
    tarballs = sorted(cache.glob("*.tgz"), key=lambda p: p.stat().st_mtime)
    if not tarballs:
        raise OracleUnavailable(f"npm pack {spec} produced no tarball in {cache}")
    with tarfile.open(tarballs[-1]) as archive:
        member = archive.getmember(MEMBER)
        archive.extractall(cache, members=[member], filter="data")
    binary.chmod(0o755)
    found = _version_of(binary)
    if found != f"codex-cli {version}":
        raise OracleUnavailable(f"{binary} reports {found!r}, expected 'codex-cli {version}'")
    return binary


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: bytes
    stderr: bytes


def run_oracle(binary: Path, cwd: str, patch: str, home: str) -> Outcome:
    done = subprocess.run([str(binary), "--codex-run-as-apply-patch", patch], cwd=cwd, capture_output=True,
                          timeout=60, env={"HOME": home, "PATH": "/usr/bin:/bin"})
    return Outcome(done.returncode, done.stdout, done.stderr)

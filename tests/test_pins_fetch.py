"""Fetching an upstream release's codex binary (codespace.contract.pins.codex_binary): the one
member is taken out of the tarball `npm pack` leaves, on every Python the project supports
(extraction filters need 3.11.4; Debian 12's python3 is 3.11.2), and nothing else it holds.

The registry is not reachable from every test machine, so `npm` here is a stand-in on PATH
that leaves a real tarball built for the case, as `npm pack` would.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from codespace.contract.pins import _MEMBER, OracleUnavailable, codex_binary

FAKE_CODEX = b"#!/bin/sh\necho 'codex-cli 9.9.9'\n"


def _npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build) -> None:
    tarball = tmp_path / "release.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        build(archive)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    # npm pack ... --pack-destination DIR: the tarball lands in DIR (the cache), as npm leaves it.
    npm.write_text(f'#!/bin/sh\nwhile [ "$1" != "--pack-destination" ]; do shift; done\ncp "{tarball}" "$2/"\n')
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CODESPACE_CACHE", str(tmp_path / "cache"))


def _add(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))


def test_the_binary_alone_is_taken_out_and_runs(tmp_path, monkeypatch):
    def build(archive):
        _add(archive, "package/package.json", b"{}")
        _add(archive, _MEMBER, FAKE_CODEX, mode=0o600)  # made executable by the fetch, whatever it says
        _add(archive, "../escaped", b"x")

    _npm(tmp_path, monkeypatch, build)
    binary = codex_binary("9.9.9", log=lambda _: None)
    assert binary == tmp_path / "cache" / "codex-9.9.9" / _MEMBER
    assert binary.read_bytes() == FAKE_CODEX and os.access(binary, os.X_OK)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "cache" / "escaped").exists()
    assert not (tmp_path / "cache" / "codex-9.9.9" / "package" / "package.json").exists()


def test_a_member_that_is_a_link_is_refused(tmp_path, monkeypatch):
    def build(archive):
        link = tarfile.TarInfo(_MEMBER)
        link.type, link.linkname = tarfile.SYMTYPE, "/bin/sh"
        archive.addfile(link)

    _npm(tmp_path, monkeypatch, build)
    with pytest.raises(OracleUnavailable, match="not a regular file"):
        codex_binary("9.9.9", log=lambda _: None)
    assert not (tmp_path / "cache" / "codex-9.9.9" / _MEMBER).exists()


def test_a_tarball_without_the_binary_says_so(tmp_path, monkeypatch):
    _npm(tmp_path, monkeypatch, lambda archive: _add(archive, "package/README.md", b"no binary"))
    with pytest.raises(OracleUnavailable, match="holds no"):
        codex_binary("9.9.9", log=lambda _: None)

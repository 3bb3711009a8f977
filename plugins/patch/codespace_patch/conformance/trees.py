"""Directory trees as comparable values, and copying fixture trees."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

Snapshot = dict[str, tuple]


def snapshot(root: str | os.PathLike[str], *, modes: bool = True) -> Snapshot:
    """Every entry under ``root``: files with content (and permission bits unless
    ``modes`` is false), directories (empty ones count), links with their text."""
    root = os.fspath(root)
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(info.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(info.st_mode):
                with open(full, "rb") as f:
                    out[rel] = ("file", f.read(), stat.S_IMODE(info.st_mode) if modes else 0)
            else:
                out[rel] = ("other", stat.S_IFMT(info.st_mode))
    return out


def describe_difference(got: Snapshot, want: Snapshot, limit: int = 5) -> str:
    lines = []
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            lines.append(f"  {key}: got {_short(got.get(key))}, want {_short(want.get(key))}")
            if len(lines) >= limit:
                break
    return "\n".join(lines)


def _short(value: tuple | None) -> str:
    if value is None:
        return "absent"
    if value[0] == "file":
        data = value[1]
        return f"file({len(data)} bytes, mode {value[2]:o}) {data[:80]!r}"
    return repr(value)


def copy_tree(source: str | os.PathLike[str] | None, target: str | os.PathLike[str]) -> None:
    """Copy ``source``'s contents into the existing directory ``target`` (nothing when absent).
    The copy is the caller's to change: its owner may write every directory and file in it
    (the shared fixtures are read-only, which root ignores and any other user does not)."""
    if source is None or not os.path.isdir(source):
        return
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(target):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o700)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o600)


def write_tree(root: Path, files: dict[str, bytes | None]) -> None:
    """Create ``files`` under ``root``; a None value makes a directory."""
    for rel, data in files.items():
        path = root / rel
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

"""One operation through upstream's ``fs/*`` methods and through our FileSystem backend,
each reduced to the same normalised fact.

A fact is ``("ok", value)`` or ``("error", class)``: values are contents (bytes),
``(kind, size, is_symlink)`` for metadata (size for regular files only), sorted
``(name, kind)`` pairs for listings, None for writes, directories made and removals.
Error classes: missing, not_a_directory, not_a_file, exists, too_large, not_empty,
symlink_refused, or the code or message that fits none of them.
"""

from __future__ import annotations

import base64
import errno
from pathlib import Path
from typing import Any

from codespace.contract import (FileSystem, FsError, ListDirRequest, MakeDirRequest, RemoveRequest,
                                StatRequest, UpstreamRpc, UpstreamRpcError, WriteFileRequest, file_uri)

from .pin_cases import Op

Fact = tuple[str, Any]

_UPSTREAM_WORDS = (("No such file", "missing"), ("Not a directory", "not_a_directory"),
                   ("is not a file", "not_a_file"), ("Is a directory", "not_a_file"), ("File exists", "exists"),
                   ("too large", "too_large"), ("Directory not empty", "not_empty"))
_ERRNOS = {errno.ENOENT: "missing", errno.ENOTDIR: "not_a_directory", errno.EISDIR: "not_a_file",
           errno.EEXIST: "exists", errno.EFBIG: "too_large", errno.ENOTEMPTY: "not_empty",
           errno.ELOOP: "symlink_refused"}
_CODES = {"not_regular": "not_a_file", "is_directory": "not_a_file", "symlink_refused": "symlink_refused"}
_OUR_KINDS = {"directory": "dir", "file": "file", "symlink": "link"}


def upstream_error_class(message: str) -> str:
    for words, name in _UPSTREAM_WORDS:
        if words in message:
            return name
    return f"other: {message}"


def our_error_class(exc: FsError) -> str:
    code = getattr(exc, "code", None)
    if code in _CODES:
        return _CODES[code]
    number = getattr(exc, "errno", None)
    if number in _ERRNOS:
        return _ERRNOS[number]
    if code == "out_of_range" or "max_file_bytes" in str(exc):
        return "too_large"
    return f"other: {code}: {str(exc)[:120]}"


def _upstream_kind(entry: dict) -> str:
    return "dir" if entry["isDirectory"] else "file" if entry["isFile"] else "other"


def upstream_fact(rpc: UpstreamRpc, root: Path, op: Op) -> Fact:
    uri = file_uri(root / op.path if op.path else root)
    try:
        if op.kind == "read":
            return "ok", base64.b64decode(rpc.call("fs/readFile", {"path": uri})["dataBase64"])
        if op.kind == "meta":
            meta = rpc.call("fs/getMetadata", {"path": uri})
            kind = _upstream_kind(meta)
            return "ok", (kind, meta["size"] if kind == "file" else None, meta["isSymlink"])
        if op.kind == "list":
            entries = rpc.call("fs/readDirectory", {"path": uri})["entries"]
            return "ok", sorted((e["fileName"], _upstream_kind(e)) for e in entries)
        if op.kind == "write":
            rpc.call("fs/writeFile", {"path": uri, "dataBase64": base64.b64encode(op.data).decode()})
        elif op.kind == "mkdir":
            rpc.call("fs/createDirectory", {"path": uri, "recursive": op.recursive})
        elif op.kind == "remove":
            rpc.call("fs/remove", {"path": uri, "recursive": op.recursive, "force": op.force})
        else:
            raise ValueError(f"unknown operation kind {op.kind!r}")
        return "ok", None
    except UpstreamRpcError as exc:
        return "error", upstream_error_class(exc.message)


async def our_fact(fs: FileSystem, root: Path, op: Op, ceiling: int) -> Fact:
    path = str(root / op.path) if op.path else str(root)
    try:
        if op.kind == "read":
            return "ok", await fs.read_bytes(path, max_bytes=ceiling)
        if op.kind == "meta":
            # Upstream describes the target and says whether the path is a link: ours in two calls.
            plain = await fs.stat(StatRequest(path=path))
            followed = await fs.stat(StatRequest(path=path, follow_symlinks=True)) if plain.is_symlink else plain
            if not plain.exists or not followed.exists:
                return "error", "missing"
            kind = "dir" if followed.is_directory else "file" if followed.is_file else "other"
            return "ok", (kind, followed.size if kind == "file" else None, plain.is_symlink)
        if op.kind == "list":
            listing = await fs.list_dir(ListDirRequest(path=path))
            return "ok", sorted((e["name"], _OUR_KINDS.get(e["kind"], "other")) for e in listing.entries)
        if op.kind == "write":
            await fs.write_file(WriteFileRequest(path=path, content=base64.b64encode(op.data).decode(),
                                                 encoding="base64"))
        elif op.kind == "mkdir":
            await fs.make_dir(MakeDirRequest(path=path, parents=op.recursive, exist_ok=op.recursive))
        elif op.kind == "remove":
            await fs.remove(RemoveRequest(path=path, recursive=op.recursive, force=op.force))
        else:
            raise ValueError(f"unknown operation kind {op.kind!r}")
        return "ok", None
    except FsError as exc:
        return "error", our_error_class(exc)


def snapshot(root: Path) -> dict[str, Any]:
    """The tree as facts, links not followed: what writes and removals left behind."""
    import hashlib
    import os
    import stat

    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            info = full.lstat()
            relative = str(full.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                out[relative] = ("link", os.readlink(full))
            elif stat.S_ISDIR(info.st_mode):
                out[relative] = ("dir",)
            elif stat.S_ISREG(info.st_mode) and info.st_blocks * 512 >= info.st_size:
                out[relative] = ("file", hashlib.sha256(full.read_bytes()).hexdigest())
            else:
                out[relative] = ("other", info.st_size)  # FIFOs and the sparse giants: not read
    return out

"""The trees and the operations the fs pin check runs through upstream and through ours.

A tree is generated from a seed (directories, files of random bytes, links to files,
to directories and to nothing, a FIFO, a sparse file over each side's read ceiling)
and written twice, once for each side, so that writes and removals on one side
cannot change what the other sees. An operation names paths relative to the tree.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

UPSTREAM_READ_CEILING = 512 * 1024 * 1024  # exec-server refuses to read files larger than this
NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_."


@dataclass(frozen=True)
class Op:
    kind: str
    """read, meta, list, write, mkdir, remove."""
    path: str
    data: bytes = b""
    recursive: bool = False
    force: bool = False

    def describe(self) -> str:
        extra = f" {len(self.data)} bytes" if self.kind == "write" else ""
        flags = "".join(f" {name}" for name, on in (("recursive", self.recursive), ("force", self.force)) if on)
        return f"{self.kind} {self.path or '.'}{extra}{flags}"


@dataclass
class Tree:
    files: dict[str, bytes]
    dirs: list[str]
    links: dict[str, str]
    """Link path -> link text (relative)."""
    fifo: str
    sparse: dict[str, int]
    """Path -> apparent size of a sparse file (no data written)."""

    def write(self, root: Path) -> None:
        for directory in self.dirs:
            (root / directory).mkdir(parents=True, exist_ok=True)
        for path, data in self.files.items():
            (root / path).write_bytes(data)
        for path, target in self.links.items():
            os.symlink(target, root / path)
        os.mkfifo(root / self.fifo)
        for path, size in self.sparse.items():
            with open(root / path, "wb") as handle:
                handle.truncate(size)


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 12))).strip(".") or "n"


def generate_tree(seed: int, *, ceiling_bytes: int) -> Tree:
    """A tree for ``seed``; ``ceiling_bytes`` is our read ceiling (the policy's max_file_bytes)."""
    rng = random.Random(seed)
    dirs = ["d0"]
    for index in range(1, rng.randint(3, 7)):
        dirs.append(f"{rng.choice(dirs)}/{_name(rng)}{index}")
    files = {}
    for index in range(rng.randint(5, 14)):
        size = rng.choice([0, 1, rng.randint(2, 300), rng.randint(300, 70_000)])
        files[f"{rng.choice(['', *dirs])}/{_name(rng)}.f{index}".lstrip("/")] = rng.randbytes(size)
    some_file, some_dir = rng.choice(sorted(files)), rng.choice(dirs)
    links = {"link-to-file": some_file, "link-to-dir": some_dir, "link-to-nothing": "missing-target",
             f"{dirs[0]}/link-up": "../" + some_file}
    sparse = {"over-our-ceiling": ceiling_bytes + 1, "over-upstream-ceiling": UPSTREAM_READ_CEILING + 1}
    return Tree(files, dirs, links, "fifo", sparse)


def operations(tree: Tree, seed: int, count: int) -> list[Op]:
    """Every fixed probe of the tree, then ``count`` generated operations."""
    rng = random.Random(seed * 7919 + 1)
    some_file = sorted(tree.files)[0]
    ops = [Op("list", ""), *(Op("list", d) for d in tree.dirs), Op("list", some_file), Op("list", "missing"),
           Op("list", "link-to-dir"), Op("read", "missing"), Op("read", tree.dirs[0]), Op("read", "fifo"),
           Op("read", f"{some_file}/below"), Op("read", "link-to-file"), Op("read", "link-to-nothing"),
           Op("read", "over-our-ceiling"), Op("read", "over-upstream-ceiling"),
           *(Op("meta", p) for p in ("", "missing", "fifo", "link-to-file", "link-to-dir", "link-to-nothing",
                                      tree.dirs[0], "over-upstream-ceiling")),
           Op("write", "new-file", b"fresh\n"), Op("write", some_file, b"replaced"),
           Op("write", "no-such-dir/x", b"x"), Op("write", f"{some_file}/x", b"x"), Op("write", tree.dirs[0], b"x"),
           Op("write", "link-to-file", b"through the link"), Op("mkdir", "made/deeper", recursive=True),
           Op("mkdir", "made-flat"), Op("mkdir", "absent/child"), Op("mkdir", tree.dirs[0]),
           Op("mkdir", f"{some_file}/sub", recursive=True),
           Op("remove", "missing"), Op("remove", "missing", force=True), Op("remove", "link-to-dir"),
           Op("remove", tree.dirs[-1], recursive=True)]
    paths = sorted(tree.files) + tree.dirs + sorted(tree.links) + ["fifo", "missing"]
    for _ in range(count):
        kind = rng.choice(["read", "meta", "list", "write", "read", "meta"])
        path = rng.choice(paths)
        if kind == "write":
            path = rng.choice([path, f"{rng.choice(tree.dirs)}/{_name(rng)}.new"])
            ops.append(Op("write", path, rng.randbytes(rng.randint(0, 5000))))
        else:
            ops.append(Op(kind, path))
    return ops

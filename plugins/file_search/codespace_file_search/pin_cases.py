"""Generated trees and queries for the find_files pin check, reproducible from (seed, index)."""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass, field

_WORDS = ["main", "Main", "src", "lib", "util", "README", "readme", "test", "tests", "config", "fooBar",
          "foo_bar", "foo-bar", "index", "app", "core", "x", "ab", "abc", "data", "Makefile", "build",
          "café", "CAFÉ", "naïve", "Ünïcode", "日本", "résumé", "mod", "v2", "file12", "A1b2", "ßtraße",
          "init", "parser", "Parser", "ok", "main.rs", "lib.rs", "a b", "x,y", "k:v", "Ωmega"]
_EXTS = ["", ".py", ".rs", ".md", ".txt", ".log", ".json", ".tmp", ".PY"]
_OPS = ["^", "$", "'", "!"]


@dataclass
class Case:
    seed: int
    index: int
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    """(link path, target text)."""
    ignores: list[tuple[str, str]] = field(default_factory=list)
    """(ignore file path, content)."""
    git: bool = False
    queries: list[str] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)


def _name(rng: random.Random) -> str:
    word = rng.choice(_WORDS)
    if rng.random() < 0.15:
        word = "." + word
    if rng.random() < 0.3:
        word += rng.choice(["", "_", "-", ""]) + rng.choice(_WORDS)
    return word.replace("/", "") + rng.choice(_EXTS)


def generate(seed: int, index: int) -> Case:
    rng = random.Random(seed * 1_000_003 + index)
    case = Case(seed, index)
    dirs = [""]
    for _ in range(rng.randint(1, 6)):
        parent = rng.choice(dirs)
        d = (parent + "/" if parent else "") + _name(rng).replace(".", "d", 1 if rng.random() < 0.5 else 0)
        if d not in dirs:
            dirs.append(d)
    if rng.random() < 0.3:  # deep beside shallow: equal scores at different depths
        leaf = _name(rng)
        deep = "/".join(["deep", "er", "est"])
        dirs += ["deep", "deep/er", deep]
        case.files += [leaf, deep + "/" + leaf]
        case.tags.add("deep-shallow")
    for _ in range(rng.randint(2, 14)):
        parent = rng.choice(dirs)
        case.files.append((parent + "/" if parent else "") + _name(rng))
    case.dirs = dirs[1:]
    case.git = rng.random() < 0.4
    if rng.random() < 0.5:
        where = rng.choice(dirs)
        kind = rng.choice([".gitignore", ".ignore"])
        patterns = rng.sample(["*.log", "*.tmp", "build/", "!keep.log", "test*", "/src", "*.PY"], rng.randint(1, 3))
        case.ignores.append(((where + "/" if where else "") + kind, "\n".join(patterns) + "\n"))
        case.tags.add(f"{kind}-{'git' if case.git else 'nogit'}")
    if rng.random() < 0.3:
        target = rng.choice(case.files + case.dirs)
        case.links.append(("link_" + str(index), target))
        case.tags.add("link")
    if rng.random() < 0.1:
        case.links.append(("dangling", "no/such/thing"))
    names = [p.rsplit("/", 1)[-1] for p in case.files + case.dirs]
    for _ in range(4):
        case.queries.append(_query(rng, names, case.files + case.dirs))
    if any(any(n.startswith(".") for n in p.split("/")) for p in case.files + case.dirs):
        case.tags.add("hidden")
    return case


def _query(rng: random.Random, names: list[str], paths: list[str]) -> str:
    roll = rng.random()
    name = rng.choice(names)
    if roll < 0.25:
        return name  # an exact name
    if roll < 0.55:  # a subsequence of a path
        path = rng.choice(paths)
        picks = sorted(rng.sample(range(len(path)), min(len(path), rng.randint(1, 5))))
        return "".join(path[i] for i in picks).strip() or path
    if roll < 0.75:  # several atoms
        return " ".join(rng.choice(names)[: rng.randint(1, 4)] for _ in range(rng.randint(2, 3)))
    op = rng.choice(_OPS)
    word = name[: rng.randint(1, max(1, len(name)))]
    if op == "$":
        return word[-3:] + "$"
    if op == "!":
        return rng.choice(names)[:2] + " !" + word[:3]
    return op + word


def build(case: Case, root: str) -> None:
    """Write the case's tree under ``root`` (which must exist and be empty)."""
    for d in case.dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in case.files:
        path = os.path.join(root, f)
        if os.path.isdir(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write("x\n")
    for path, text in case.ignores:
        with open(os.path.join(root, path), "w") as out:
            out.write(text)
    for link, target in case.links:
        depth = link.count("/")
        os.symlink("../" * depth + target, os.path.join(root, link))
    if case.git:
        subprocess.run(["git", "init", "-q", root], check=True, capture_output=True)

"""Run cases against the oracle and CodeSpace, and compare everything observable.

For every case the oracle and the helper executable (upstream mode) each get a
fresh copy of the tree; exit code, stdout, stderr (with each tree's path
replaced by ``<D>``) and the resulting trees must be identical. Atomic mode runs
in-process on a third copy: where the oracle succeeded it must produce the same
tree and summary; where the oracle failed it must report the same message and
leave the tree exactly as it was.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .fuzz import ROOT, Case
from .helper import TEST_PLUGINS, helper_argv, helper_env, real_fs_installed, run_helper
from .oracle import Outcome, run_oracle
from .trees import describe_difference, snapshot, write_tree


@dataclass
class Verdict:
    case: Case
    ok: bool
    problem: str = ""
    upstream_code: int = -1
    upstream_error: str = ""


def _norm(data: bytes, root: str) -> bytes:
    return data.replace(root.encode(), b"<D>")


_KINDS = [
    "Invalid patch hunk", "Invalid patch:", "Failed to find expected lines", "Failed to find context",
    "Failed to write file", "Failed to delete file", "Failed to remove original", "No files were modified",
]


def classify(message: str) -> str:
    """A failure's kind, for the run's statistics."""
    if message.startswith("Failed to read file to update"):
        return "Failed to read file to update: " + message.split(": ", 1)[-1].split(" from index")[0].strip()
    if message.startswith("Invalid patch hunk"):
        return "Invalid patch hunk: " + message.split(": ", 1)[-1].split("'")[0].strip()
    return next((kind for kind in _KINDS if message.startswith(kind)), message[:40])


def _tree(root: str) -> dict[str, tuple]:
    """The tree with its own location replaced by <D> in names (a relative path such
    as ' /abs/...' creates directories named after the tree)."""
    return {key.replace(root.lstrip("/"), "<D>"): value for key, value in snapshot(root).items()}


def _fresh(base: str) -> str:
    return os.path.realpath(tempfile.mkdtemp(prefix="t", dir=base))


# The backends the atomic run loads, as entry points (name, value): the same ones the helper is told.
_BACKENDS = {"real": [("fs", "codespace_fs.plugin")], "test": [("patch_testfs", "codespace_patch_testfs")]}


async def atomic_inprocess(root: str, patch: str, state_dir: str, backend: str) -> Outcome:
    """Atomic mode through the library, against the same backend the helper uses."""
    from codespace.contract import gate

    from ..errors import PatchError
    from ..journal import commit_once
    from ..parser import parse_patch
    from ..sections import run_sections
    from ..stores import OverlayStore

    workspace = gate.open_workspace(root)
    fs, failed = gate.filesystem(workspace, _BACKENDS[backend])
    assert fs is not None, f"no file-system backend ({backend}): {failed}"
    max_bytes = workspace.limits.max_file_bytes
    try:
        patch_obj = parse_patch(patch)
        store = OverlayStore(fs, max_bytes, root)
        run = await run_sections(patch_obj, lambda p: gate.normalize(p, root), store)
        await commit_once(fs, Path(state_dir) / "patch-journal", store.changes(), store.new_dirs, max_bytes)
    except PatchError as exc:
        return Outcome(1, b"", (exc.message + "\n").encode())
    return Outcome(0, run.summary().encode(), b"")


def run_case(case: Case, oracle: Path, base: str, backend: str, argv: list[str], check_atomic: bool = True) -> Verdict:
    home = _fresh(base)
    roots = [_fresh(base) for _ in range(3)]
    try:
        for root in roots:
            write_tree(Path(root), case.files)
        before = _tree(roots[0])
        upstream = run_oracle(oracle, roots[0], case.patch.replace(ROOT, roots[0]), home)
        env = helper_env(os.path.join(home, "state"), home, backend)
        mine = run_helper(argv, roots[1], case.patch.replace(ROOT, roots[1]), env)
        want_tree, got_tree = _tree(roots[0]), _tree(roots[1])
        problems = []
        if mine.code != upstream.code:
            problems.append(f"exit code: codespace {mine.code}, upstream {upstream.code}")
        for name in ("stdout", "stderr"):
            a, b = _norm(getattr(mine, name), roots[1]), _norm(getattr(upstream, name), roots[0])
            if a != b:
                problems.append(f"{name}: codespace {a[:400]!r}\n          upstream  {b[:400]!r}")
        if got_tree != want_tree:
            problems.append("tree differs:\n" + describe_difference(got_tree, want_tree))
        if check_atomic:
            atomic = asyncio.run(
                atomic_inprocess(roots[2], case.patch.replace(ROOT, roots[2]), os.path.join(home, "astate"), backend)
            )
            atomic_tree = _tree(roots[2])
            expect_tree = want_tree if upstream.code == 0 else before
            if atomic_tree != expect_tree:
                problems.append("atomic mode tree differs:\n" + describe_difference(atomic_tree, expect_tree))
            if atomic.code != upstream.code or _norm(atomic.stdout + atomic.stderr, roots[2]) != _norm(
                upstream.stdout + upstream.stderr, roots[0]
            ):
                problems.append(f"atomic mode output: {_norm(atomic.stdout + atomic.stderr, roots[2])[:300]!r}")
        first_error = classify(_norm(upstream.stderr, roots[0]).decode("utf-8", "replace"))
        return Verdict(case, not problems, "\n".join(problems), upstream.code, first_error)
    finally:
        for path in (home, *roots):
            shutil.rmtree(path, ignore_errors=True)


def run_cases(cases: list[Case], oracle: Path, *, workers: int = 2, backend: str = "auto", progress=None) -> list[Verdict]:  # noqa: ANN001
    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    if backend == "test":
        import sys

        if str(TEST_PLUGINS) not in sys.path:
            sys.path.insert(0, str(TEST_PLUGINS))  # for the in-process atomic run
    argv = helper_argv(backend)
    base = tempfile.mkdtemp(prefix="codespace-patch-diff-")
    verdicts: list[Verdict] = []
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for verdict in pool.map(lambda c: run_case(c, oracle, base, backend, argv), cases):
                verdicts.append(verdict)
                if progress is not None:
                    progress(verdict)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return verdicts

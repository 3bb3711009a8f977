"""Upstream's fixtures as differential cases: each must give the fixture's expected tree
through the helper, and the binary's exact outcome through the helper and atomic mode."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .differential import run_case
from .fixtures import load_fixtures
from .fuzz import Case
from .helper import TEST_PLUGINS, helper_argv, helper_env, real_fs_installed, run_helper
from .trees import describe_difference, snapshot, write_tree


def fixture_cases() -> list[tuple[str, Case, Path]]:
    """Each upstream fixture as a differential case plus its expected tree."""
    out = []
    for index, fixture in enumerate(load_fixtures()):
        files: dict[str, bytes | None] = {}
        if fixture.input is not None:
            for dirpath, dirnames, filenames in os.walk(fixture.input):
                for name in dirnames:
                    files[os.path.relpath(os.path.join(dirpath, name), fixture.input)] = None
                for name in filenames:
                    full = os.path.join(dirpath, name)
                    with open(full, "rb") as f:
                        files[os.path.relpath(full, fixture.input)] = f.read()
        out.append((fixture.name, Case(index, files, fixture.patch, ["fixture"]), fixture.expected))
    return out


def chosen_backend(backend: str) -> str:
    """'real' (codespace-fs) or 'test' (the tests' backend, put on sys.path for in-process runs)."""
    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    if backend == "test" and str(TEST_PLUGINS) not in sys.path:
        sys.path.insert(0, str(TEST_PLUGINS))
    return backend


def run_fixtures(oracle: Path, backend: str,
                 on_result: Callable[[str, list[str]], None] | None = None) -> list[tuple[str, list[str]]]:
    """(fixture name, problems) for every fixture; raises FixturesMissing without them."""
    backend = chosen_backend(backend)
    argv = helper_argv(backend)
    results = []
    base = tempfile.mkdtemp(prefix="codespace-patch-fixtures-")
    try:
        for name, case, expected in fixture_cases():
            want = snapshot(expected, modes=False)
            problems = []
            root = os.path.realpath(tempfile.mkdtemp(dir=base))
            write_tree(Path(root), case.files)
            home = tempfile.mkdtemp(dir=base)
            run_helper(argv, root, case.patch, helper_env(os.path.join(home, "s"), home, backend))
            got = snapshot(root, modes=False)
            if got != want:
                problems.append("helper tree differs from expected/:\n" + describe_difference(got, want))
            verdict = run_case(case, oracle, base, backend, argv)
            if not verdict.ok:
                problems.append(verdict.problem)
            results.append((name, problems))
            if on_result is not None:
                on_result(name, problems)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results

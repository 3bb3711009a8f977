"""Glob patterns in bounded time (codespace.contract.globs): the guard must answer as
pathspec's regex answers, group included (pathspec reads it). The walks that use it are
tested with pathological patterns in codespace-fs and codespace-file-search."""

from __future__ import annotations

import random

import pytest
from codespace.contract.globs import Backtracker, Guarded, guard_globs

pathspec = pytest.importorskip("pathspec")  # the plugins' dependency, not the core's

PLAIN = ["*.py", "/build", "node_modules/", "a/**/b", "**/x", "x/**", "*?[a-c]z", "[!abc]x", "\\*a", "foo/*",
         "a/*/**/c", ".*", "***/x", "x***", "*a*b", "**/a/**/b", "a/**/b/**/c", "*.min.*", "[a-c]*[!x]?",
         "!*.txt", "src/**/*.test.*", "a\\ ", "**/a/*/b/**", "*/"]
PIECES = ["a", "b", "x", "c", "z", ".", "py", "min", "foo", "src", "test", "txt", "*", " ", "\n"]


def _path(rng: random.Random) -> str:
    path = "/".join("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 5)))
    return path + "/" if rng.random() < 0.3 else path


@pytest.mark.parametrize("line", PLAIN)
def test_the_linear_matcher_answers_as_the_regex(line):
    rng = random.Random(line)
    for pattern in pathspec.GitIgnoreSpec.from_lines([line]).patterns:
        if pattern.regex is None:
            continue
        linear = Backtracker(pattern.regex)
        for _ in range(2000):
            path = _path(rng)
            want, got = pattern.regex.search(path), linear.search(path)
            assert (want is None) == (got is None), (line, path)
            if want is not None:
                assert (want.span(), want.groupdict()) == (got.span(), got.groupdict()), (line, path)


def test_a_guarded_spec_decides_as_pathspec_on_short_and_long_paths():
    rng = random.Random(171)
    plain = pathspec.GitIgnoreSpec.from_lines(PLAIN)
    guarded = guard_globs(pathspec.GitIgnoreSpec.from_lines(PLAIN))
    assert any(isinstance(p.regex, Guarded) for p in guarded.patterns)
    for _ in range(3000):
        path = _path(rng)
        if rng.random() < 0.2:
            path = "/".join([path] * 40)  # long enough for the linear matcher to take it
        assert guarded.check_file(path) == plain.check_file(path), path


def test_patterns_too_long_or_too_starry_are_named():
    from codespace.contract import glob_too_costly

    assert glob_too_costly("src/**/*.py") is None
    assert glob_too_costly("*a" * 2000) is not None and "characters long" in glob_too_costly("x" * 1025)
    assert "'*'" in glob_too_costly("*" * 33)

#!/usr/bin/env python3
"""Pin check for codespace-patch: is this plugin still exactly the pinned upstream?

    python plugins/patch/pin_check.py --ci                  # CI: fixtures + 200 generated cases, fixed seed
    python plugins/patch/pin_check.py --cases 2000 --seed 7 # a full differential run
    python plugins/patch/pin_check.py --replay 7:123        # show one generated case and both results

Steps: (1) the package metadata must declare openai/codex at the release of the
binary checked against, component codex-apply-patch; (2) the pinned release's
binary is fetched with ``npm pack`` into ~/.cache/codespace (once; about 170 MB)
and must report its version; (3) every upstream fixture must give the expected
tree through both the binary and ``codespace-apply-patch`` (and atomic mode);
(4) random patches over random trees must give identical exit codes, stdout,
stderr and trees through both. Any disagreement, or an oracle that cannot be
fetched, exits non-zero.

For a pin update: change the two upstream URLs in plugins/patch/pyproject.toml,
reinstall, and run ``pin_check.py --codex-version NEW --cases 2000``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conformance.differential import Verdict, run_cases  # noqa: E402
from conformance.fixtures import FixturesMissing, load_fixtures  # noqa: E402
from conformance.fuzz import Case, generate  # noqa: E402
from conformance.oracle import PIN_VERSION, OracleUnavailable, ensure_oracle  # noqa: E402

CI_CASES = 200
CI_SEED = 171


def say(text: str) -> None:
    print(text, flush=True)


def check_metadata(version: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, distribution

    from codespace.plugins import pin_from_metadata

    try:
        dist = distribution("codespace-patch")
    except PackageNotFoundError:
        return ["codespace-patch is not installed in this environment (pip install -e plugins/patch)"]
    pin = pin_from_metadata(dist.metadata.get_all("Project-URL") or [])
    want = f"rust-v{version}"
    problems = []
    if pin is None:
        problems.append("package metadata declares no upstream pin ([project.urls] upstream = ...)")
    else:
        if pin.project != "openai/codex":
            problems.append(f"pin project is {pin.project}, expected openai/codex")
        if pin.release != want:
            problems.append(f"pin release is {pin.release}, but the binary checked is {want}")
        if "codex-apply-patch" not in pin.components:
            problems.append(f"pin components {pin.components} lack codex-apply-patch")
    eps = [ep for ep in dist.entry_points if ep.group == "codespace.plugins"]
    if [ep.name for ep in eps] != ["patch"]:
        problems.append(f"entry points in codespace.plugins: {[ep.name for ep in eps]}, expected ['patch']")
    return problems


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


def run_fixtures(oracle: Path, backend: str) -> int:
    from conformance.differential import run_case
    from conformance.helper import TEST_PLUGINS, helper_argv, helper_env, real_fs_installed, run_helper
    from conformance.trees import describe_difference, snapshot, write_tree

    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    if backend == "test" and str(TEST_PLUGINS) not in sys.path:
        sys.path.insert(0, str(TEST_PLUGINS))
    argv = helper_argv(backend)
    failures = 0
    base = tempfile.mkdtemp(prefix="codespace-patch-fixtures-")
    try:
        for name, case, expected in fixture_cases():
            want = snapshot(expected, modes=False)
            problems = []
            # Against the fixture's expected tree, through the helper (upstream mode).
            root = os.path.realpath(tempfile.mkdtemp(dir=base))
            write_tree(Path(root), case.files)
            home = tempfile.mkdtemp(dir=base)
            run_helper(argv, root, case.patch, helper_env(os.path.join(home, "s"), home, backend))
            got = snapshot(root, modes=False)
            if got != want:
                problems.append("helper tree differs from expected/:\n" + describe_difference(got, want))
            # And identical to the binary in every observable way (atomic mode included).
            verdict = run_case(case, oracle, base, backend, argv)
            if not verdict.ok:
                problems.append(verdict.problem)
            failures += bool(problems)
            say(f"  {'ok  ' if not problems else 'FAIL'} {name}" + ("".join("\n      " + p for p in problems)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return failures


def report(verdict: Verdict, seed: int) -> None:
    case = verdict.case
    say(f"  DISAGREEMENT seed {seed} case {case.index} (replay: --replay {seed}:{case.index}) tags {case.tags}")
    for line in verdict.problem.splitlines():
        say("      " + line)


def replay(spec: str, oracle: Path, backend: str) -> int:
    from conformance.differential import run_case
    from conformance.helper import TEST_PLUGINS, helper_argv, real_fs_installed

    seed, index = (int(x) for x in spec.split(":"))
    case = generate(seed, index)
    say(f"case {seed}:{index} tags {case.tags}")
    for path, data in sorted(case.files.items()):
        say(f"  file {path!r}: {data!r}")
    say(f"  patch: {case.patch!r}")
    if backend == "auto":
        backend = "real" if real_fs_installed() else "test"
    if backend == "test":
        sys.path.insert(0, str(TEST_PLUGINS))
    base = tempfile.mkdtemp()
    try:
        verdict = run_case(case, oracle, base, backend, helper_argv(backend))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    say("  agree" if verdict.ok else "  DISAGREE:\n" + verdict.problem)
    return 0 if verdict.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help=f"fixtures + {CI_CASES} cases with seed {CI_SEED}")
    parser.add_argument("--cases", type=int, default=2000, help="generated cases (default 2000)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the generated cases (default: random)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--codex-version", default=PIN_VERSION, help=f"release to check against (default {PIN_VERSION})")
    parser.add_argument("--backend", choices=["auto", "real", "test"], default="auto",
                        help="file-system backend for CodeSpace's side: codespace-fs, or the tests' backend")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    parser.add_argument("--tags", action="store_true", help="also count the generated features")
    parser.add_argument("--replay", metavar="SEED:INDEX", help="run one generated case and show it")
    args = parser.parse_args(argv)
    cases = CI_CASES if args.ci else args.cases
    seed = (CI_SEED if args.ci else random.randrange(1, 10**6)) if args.seed is None else args.seed

    say(f"pin check: codespace-patch against openai/codex rust-v{args.codex_version}")
    problems = check_metadata(args.codex_version)
    for problem in problems:
        say(f"  FAIL metadata: {problem}")
    if problems:
        return 1
    say("  ok   metadata pin: openai/codex rust-v%s (codex-apply-patch)" % args.codex_version)
    try:
        oracle = ensure_oracle(args.codex_version, fetch=not args.no_fetch, log=say)
    except OracleUnavailable as exc:
        say(f"  FAIL oracle: {exc}")
        say("pin check FAILED: the pinned binary is needed to validate the pin; nothing was compared")
        return 2
    say(f"  ok   oracle {oracle}")
    if args.replay:
        return replay(args.replay, oracle, args.backend)

    say("fixtures:")
    try:
        fixture_failures = run_fixtures(oracle, args.backend)
    except FixturesMissing as exc:
        say(f"  FAIL {exc}")
        return 1

    say(f"differential: {cases} generated cases, seed {seed}, {args.workers} workers")
    started = time.monotonic()
    count = 0

    def progress(verdict: Verdict) -> None:
        nonlocal count
        count += 1
        if not verdict.ok:
            report(verdict, seed)
        if count % 100 == 0:
            say(f"  ... {count}/{cases} ({time.monotonic() - started:.0f} s)")

    verdicts = run_cases([generate(seed, i) for i in range(cases)], oracle, workers=args.workers,
                         backend=args.backend, progress=progress)
    disagreements = [v for v in verdicts if not v.ok]
    say(f"  {len(verdicts)} cases, {len(disagreements)} disagreements, seed {seed}, {time.monotonic() - started:.0f} s")
    say(f"  upstream succeeded in {sum(v.upstream_code == 0 for v in verdicts)} cases; failures by message:")
    errors = Counter(v.upstream_error for v in verdicts if v.upstream_code != 0)
    for message, number in errors.most_common():
        say(f"    {number:5d}  {message}")
    if args.tags:
        tags = Counter(t for v in verdicts for t in v.case.tags)
        say("  generated features: " + ", ".join(f"{t} {n}" for t, n in sorted(tags.items())))
    ok = not fixture_failures and not disagreements
    say(f"pin check {'passed' if ok else 'FAILED'}: {fixture_failures} fixture failure(s), "
        f"{len(disagreements)} disagreement(s) in {len(verdicts)} cases (seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

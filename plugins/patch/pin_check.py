#!/usr/bin/env python3
"""Pin check for codespace-patch: is this plugin still exactly the pinned upstream?

    python plugins/patch/pin_check.py --ci                  # CI: fixtures + 200 generated cases, fixed seed
    python plugins/patch/pin_check.py --cases 2000 --seed 7 # a full differential run
    python plugins/patch/pin_check.py --replay 7:123        # show one generated case and both results

The same check ``codespace pins check --plugin codespace-patch`` runs (codespace_patch.pin),
shown in more detail. Steps: (1) the package metadata must declare openai/codex at the
release of the binary checked against, component codex-apply-patch; (2) that release's
binary is fetched with ``npm pack`` into ~/.cache/codespace (once; about 170 MB) and must
report its version; (3) every upstream fixture must give the expected tree through both
the binary and ``codespace-apply-patch`` (and atomic mode); (4) random patches over
random trees must give identical exit codes, stdout, stderr and trees through both. Any
disagreement, or an oracle that cannot be fetched, exits non-zero.

For a pin update, see docs/pin-updates.md.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter

from codespace.contract import OracleUnavailable, codex_binary
from codespace_patch import pin
from codespace_patch.conformance.fixtures import FixturesMissing
from codespace_patch.conformance.oracle import PIN_VERSION


def say(text: str) -> None:
    print(text, flush=True)


def replay(spec: str, oracle, backend: str) -> int:  # noqa: ANN001
    from codespace_patch.conformance.differential import run_case
    from codespace_patch.conformance.fixture_run import chosen_backend
    from codespace_patch.conformance.fuzz import generate
    from codespace_patch.conformance.helper import helper_argv

    seed, index = (int(x) for x in spec.split(":"))
    case = generate(seed, index)
    say(f"case {seed}:{index} tags {case.tags}")
    for path, data in sorted(case.files.items()):
        say(f"  file {path!r}: {data!r}")
    say(f"  patch: {case.patch!r}")
    backend = chosen_backend(backend)
    base = tempfile.mkdtemp()
    try:
        verdict = run_case(case, oracle, base, backend, helper_argv(backend))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    say("  agree" if verdict.ok else "  DISAGREE:\n" + verdict.problem)
    return 0 if verdict.ok else 1


def fixtures(oracle, backend: str) -> int:  # noqa: ANN001
    from codespace_patch.conformance.fixture_run import run_fixtures

    def show(name: str, problems: list[str]) -> None:
        say(f"  {'ok  ' if not problems else 'FAIL'} {name}" + "".join("\n      " + p for p in problems))

    return sum(bool(problems) for _, problems in run_fixtures(oracle, backend, show))


def differential(oracle, seed: int, cases: int, args: argparse.Namespace) -> int:  # noqa: ANN001
    say(f"differential: {cases} generated cases, seed {seed}, {args.workers} workers")
    started, count = time.monotonic(), 0

    def progress(verdict) -> None:  # noqa: ANN001
        nonlocal count
        count += 1
        if not verdict.ok:
            say(f"  DISAGREEMENT seed {seed} case {verdict.case.index} (replay: --replay {seed}:{verdict.case.index})"
                f" tags {verdict.case.tags}")
            for line in verdict.problem.splitlines():
                say("      " + line)
        if count % 100 == 0:
            say(f"  ... {count}/{cases} ({time.monotonic() - started:.0f} s)")

    verdicts = pin.generated(oracle, seed, cases, workers=args.workers, backend=args.backend, on_verdict=progress)
    disagreements = sum(not v.ok for v in verdicts)
    say(f"  {len(verdicts)} cases, {disagreements} disagreements, seed {seed}, {time.monotonic() - started:.0f} s")
    say(f"  upstream succeeded in {sum(v.upstream_code == 0 for v in verdicts)} cases; failures by message:")
    for message, number in pin.upstream_failures(verdicts).most_common():
        say(f"    {number:5d}  {message}")
    if args.tags:
        tags = Counter(t for v in verdicts for t in v.case.tags)
        say("  generated features: " + ", ".join(f"{t} {n}" for t, n in sorted(tags.items())))
    return disagreements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help=f"fixtures + {pin.CI_CASES} cases with seed {pin.CI_SEED}")
    parser.add_argument("--cases", type=int, default=pin.DEFAULT_CASES, help="generated cases (default 2000)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the generated cases (default: random)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--codex-version", default=None,
                        help="release to check against, e.g. 0.171.0 (default: the package's declared pin)")
    parser.add_argument("--backend", choices=["auto", "real", "test"], default="auto",
                        help="file-system backend for CodeSpace's side: codespace-fs, or the tests' backend")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    parser.add_argument("--tags", action="store_true", help="also count the generated features")
    parser.add_argument("--replay", metavar="SEED:INDEX", help="run one generated case and show it")
    args = parser.parse_args(argv)
    cases = pin.CI_CASES if args.ci else args.cases
    seed = (pin.CI_SEED if args.ci else random.randrange(1, 10**6)) if args.seed is None else args.seed
    declared = pin.declared_pin()[1]
    args.codex_version = args.codex_version or (declared or f"rust-v{PIN_VERSION}").removeprefix("rust-v")
    release = f"rust-v{args.codex_version}"

    say(f"pin check: {pin.PLUGIN} against openai/codex {release}")
    problems, notes = pin.metadata_problems(release)
    for problem in problems + notes:  # here the declared release must be the one checked
        say(f"  FAIL metadata: {problem}")
    if problems or notes:
        return 1
    say(f"  ok   metadata pin: openai/codex {release} ({pin.COMPONENT})")
    try:
        oracle = codex_binary(args.codex_version, fetch=not args.no_fetch, log=say)
    except OracleUnavailable as exc:
        say(f"  FAIL oracle: {exc}")
        say("pin check FAILED: the pinned binary is needed to validate the pin; nothing was compared")
        return 2
    say(f"  ok   oracle {oracle}")
    if args.replay:
        return replay(args.replay, oracle, args.backend)
    say("fixtures:")
    try:
        fixture_failures = fixtures(oracle, args.backend)
    except FixturesMissing as exc:
        say(f"  FAIL {exc}")
        return 1
    disagreements = differential(oracle, seed, cases, args)
    ok = not fixture_failures and not disagreements
    say(f"pin check {'passed' if ok else 'FAILED'}: {fixture_failures} fixture failure(s), "
        f"{disagreements} disagreement(s) in {cases} cases (seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

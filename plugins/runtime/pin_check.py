#!/usr/bin/env python3
"""Pin check for codespace-runtime: do our socket placement and hardening behave as upstream's?

    python plugins/runtime/pin_check.py                          # both components, against the pin
    python plugins/runtime/pin_check.py --release rust-v0.169.0  # against another release
    python plugins/runtime/pin_check.py --component codex-uds    # one of them

The release's binary is fetched with ``npm pack`` into ~/.cache/codespace (once); its
``app-server --listen unix://PATH`` and its hardened voice helper are the oracle (see README.md,
"Pin check"). The check has no generated cases, so ``--ci`` is accepted and changes nothing. The
report goes to stdout; exit 0 when every check agrees (only listed differences), 1 when an
unlisted difference was found, 2 when a check could not run.
"""

from __future__ import annotations

import argparse
import sys

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary
from codespace_runtime.pin_check import checks

PINNED = "rust-v0.171.0"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    available = {check.component: check for check in checks()}
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help="accepted for symmetry; every run compares all cases")
    parser.add_argument("--release", default=PINNED, help=f"upstream tag to check against (default {PINNED})")
    parser.add_argument("--component", choices=sorted(available), action="append",
                        help="check only this component (repeatable; default: both)")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    args = parser.parse_args(argv)
    if not args.release.startswith("rust-v"):
        parser.error(f"--release must be an upstream tag like {PINNED}, not {args.release!r}")
    version = args.release.removeprefix("rust-v")
    try:
        codex = codex_binary(version, fetch=not args.no_fetch, log=say)
    except OracleUnavailable as exc:
        print(f"codespace-runtime {args.release}: could not run: {exc}")
        return 2
    request = PinCheckRequest(args.release, codex, ci=args.ci, log=say)
    worst = 0
    for component in args.component or sorted(available):
        report = available[component].run(request)
        verdict = "agrees" if report.agrees else ("could not run" if report.unavailable else "DIFFERS")
        print(f"{report.plugin} {report.component} {report.release}: {verdict} ({report.cases} cases)")
        if report.unavailable:
            print(f"  unavailable: {report.unavailable}")
        for difference in sorted(report.differences, key=lambda d: d.listed is not None):
            mark = "listed  " if difference.listed else "UNLISTED"
            print(f"  {mark} {difference.case}: {difference.detail}")
        for note in report.notes:
            print(f"  note: {note}")
        worst = max(worst, 0 if report.agrees else (2 if report.unavailable else 1))
    return worst


if __name__ == "__main__":
    sys.exit(main())

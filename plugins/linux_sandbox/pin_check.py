#!/usr/bin/env python3
"""Pin check for codespace-linux-sandbox: does ours still behave as the pinned ``codex sandbox``?

    python plugins/linux_sandbox/pin_check.py --ci                       # CI (the whole check: a few seconds)
    python plugins/linux_sandbox/pin_check.py --release rust-v0.169.0    # against another release
    python plugins/linux_sandbox/pin_check.py --listed                   # the deliberate differences too

The same check ``codespace pins check --plugin codespace-linux-sandbox`` runs
(codespace_linux_sandbox.pin_check), printed in more detail: the binary's sandbox surface, the probe
matrix under both sides (both policies, each engine that works here) and the bubblewrap argv each side
runs (strace). The release's binary is fetched with ``npm pack`` into ~/.cache/codespace once. Exit 0
when every difference is a listed one (README.md, "Pin check"), 1 when one is not, 2 when the check
cannot run (no binary, no strace, a side that fails to run). For a pin update, see docs/pin-updates.md.
"""

from __future__ import annotations

import argparse
import re
import sys

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary
from codespace_linux_sandbox import pin_check

PINNED = "rust-v0.171.0"


def say(text: str) -> None:
    print(text, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ci", action="store_true", help="CI run (the check is bounded already: same as without)")
    parser.add_argument("--release", default=PINNED, help=f"upstream tag to check against (default {PINNED})")
    parser.add_argument("--seed", type=int, default=None, help="accepted for a uniform command line; unused")
    parser.add_argument("--listed", action="store_true", help="print the listed (deliberate) differences too")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"rust-v\d+\.\d+\.\d+", args.release):
        parser.error(f"--release must look like rust-v0.171.0, not {args.release!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    version = args.release.removeprefix("rust-v")
    try:
        codex = codex_binary(version, log=lambda m: print(m, file=sys.stderr, flush=True))
    except OracleUnavailable as exc:
        say(f"{pin_check.PLUGIN} ({pin_check.COMPONENT}) against {args.release}: cannot run: {exc}")
        return 2
    request = PinCheckRequest(release=args.release, codex=codex, ci=args.ci, seed=args.seed,
                              log=lambda m: print(m, file=sys.stderr, flush=True))
    report = pin_check.run(request)
    say(f"{report.plugin} ({report.component}) against {report.release}: {report.cases} cases, "
        f"{len(report.differences)} differences ({len(report.unlisted)} unlisted)")
    for difference in report.differences:
        if difference.listed is None:
            say(f"  UNLISTED {difference.case}: {difference.detail}")
        elif args.listed:
            say(f"  listed   {difference.case}: {difference.detail} -- {difference.listed}")
    for note in report.notes:
        say(f"  note: {note}")
    if report.unavailable:
        say(f"  cannot run: {report.unavailable}")
        return 2
    say("  agrees" if report.agrees else "  DIFFERS (see UNLISTED above)")
    return 0 if report.agrees else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Pin check for codespace-fs: do our file operations give upstream's facts?

    python plugins/fs/pin_check.py --ci                     # CI: 3 trees x (fixed probes + 40 generated ops), seed 171
    python plugins/fs/pin_check.py --cases 300 --seed 9     # 10 trees, 300 generated ops each
    python plugins/fs/pin_check.py --release rust-v0.169.0  # against another release

The release's binary is fetched with ``npm pack`` into ~/.cache/codespace (once) and
its ``codex exec-server`` fs/* methods are the oracle (see README.md, "Pin
check"). The report goes to stdout; exit 0 when the check agrees (only listed
differences), 1 when an unlisted difference was found, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import sys

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary
from codespace_fs.pin_compare import PIN_CHECK

PINNED = "rust-v0.171.0"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help="fixed seed and a bounded case count")
    parser.add_argument("--release", default=PINNED, help=f"upstream tag to check against (default {PINNED})")
    parser.add_argument("--cases", type=int, default=None, help="generated operations per tree (default: 40 with --ci, else 150)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the generated cases (default 171)")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    args = parser.parse_args(argv)
    if not args.release.startswith("rust-v"):
        parser.error(f"--release must be an upstream tag like {PINNED}, not {args.release!r}")
    if args.cases is not None and args.cases < 0:
        parser.error("--cases must be 0 or more")
    version = args.release.removeprefix("rust-v")
    try:
        codex = codex_binary(version, fetch=not args.no_fetch, log=say)
    except OracleUnavailable as exc:
        print(f"{PIN_CHECK.plugin} {PIN_CHECK.component} {args.release}: could not run: {exc}")
        return 2
    request = PinCheckRequest(args.release, codex, ci=args.ci, seed=args.seed, cases=args.cases, log=say)
    report = PIN_CHECK.run(request)
    verdict = "agrees" if report.agrees else ("could not run" if report.unavailable else "DIFFERS")
    print(f"{report.plugin} {report.component} {report.release}: {verdict} ({report.cases} cases)")
    if report.unavailable:
        print(f"  unavailable: {report.unavailable}")
    for difference in report.differences:
        mark = "listed  " if difference.listed else "UNLISTED"
        print(f"  {mark} {difference.case}: {difference.detail}")
    for note in report.notes:
        print(f"  note: {note}")
    return 0 if report.agrees else (2 if report.unavailable else 1)


if __name__ == "__main__":
    sys.exit(main())

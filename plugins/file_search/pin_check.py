#!/usr/bin/env python3
"""Pin check for codespace-file-search: does find_files rank as the pinned Codex does?

    python plugins/file_search/pin_check.py --ci                   # CI: fixed seed, 60 trees x 4 queries
    python plugins/file_search/pin_check.py --cases 300 --seed 7   # 300 generated trees (4 queries each)
    python plugins/file_search/pin_check.py --release rust-v0.169.0

Fetches the release's codex binary (npm pack, cached under ~/.cache/codespace), starts one
``codex app-server`` and compares find_files with ``fuzzyFileSearch`` on generated trees.
Exit 0 when every difference is a listed (deliberate) one, 1 otherwise, 2 without an oracle.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from codespace.contract import OracleUnavailable, PinCheckRequest, codex_binary


def say(text: str) -> None:
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    from codespace_file_search.pin import pin_check

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help="fixed seed and a bounded number of trees")
    parser.add_argument("--cases", type=int, default=None, help="generated trees (each is queried 4 times)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--release", default="rust-v0.171.0", help="upstream tag (default rust-v0.171.0)")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    parser.add_argument("--show", type=int, default=20, help="differences to print (default 20)")
    args = parser.parse_args(argv)
    if not args.release.startswith("rust-v"):
        parser.error(f"--release must look like rust-vX.Y.Z, not {args.release!r}")
    version = args.release.removeprefix("rust-v")
    try:
        codex = codex_binary(version, fetch=not args.no_fetch, log=say)
    except OracleUnavailable as exc:
        say(f"pin check FAILED: no oracle: {exc}")
        return 2
    request = PinCheckRequest(release=args.release, codex=codex, ci=args.ci, seed=args.seed, cases=args.cases,
                              log=lambda line: print(line, file=sys.stderr, flush=True))
    report = pin_check().run(request)
    say(f"{report.plugin} / {report.component} against {report.release}: {report.cases} cases")
    for note in report.notes:
        say(f"  note: {note}")
    if report.unavailable:
        say(f"  unavailable: {report.unavailable}")
    listed = Counter(d.listed for d in report.differences if d.listed)
    for reason, count in listed.items():
        say(f"  {count:5d} listed difference(s): {reason}")
    for diff in report.unlisted[: args.show]:
        say(f"  DIFFERENCE {diff.case}: {diff.detail}")
    agreeing = report.cases - len(report.differences)
    say(f"pin check {'passed' if report.agrees else 'FAILED'}: {agreeing}/{report.cases} identical, "
        f"{sum(listed.values())} listed, {len(report.unlisted)} unlisted")
    return 0 if report.agrees else (2 if report.unavailable else 1)


if __name__ == "__main__":
    sys.exit(main())

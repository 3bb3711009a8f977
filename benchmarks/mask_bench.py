"""What the system secrets' deny-read masks cost a command of a server that is not root, side by
side in one run: CodeSpace's default policy against one that makes the five secrets readable (so
no mask is asked for), both through the per-command helper and the fast path.

    python benchmarks/mask_bench.py [--rounds 40]     # as a user other than root; BENCH_DIR=DIR

Since the helper leaves out masks its uid could not open anyway (bwrap_argv.masked_deny_paths), the
two should be equal; before, the default paid a bwrap mount per secret.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import sandbox_bench  # noqa: E402  (this directory's module, not an installed one)

SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    if os.geteuid() == 0:
        print("mask_bench: run it as a user other than root (a root server keeps every mask)", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="mask-bench-", dir=os.environ.get("BENCH_DIR", str(Path.cwd()))))
    readable = "[filesystem.paths]\n" + "".join(f'"{path}" = "read"\n' for path in SECRETS)
    variants = {}
    variants["helper-default"], variants["launch-default"] = sandbox_bench._helper_variant(base, "d", "", "bubblewrap")
    variants["helper-nomask"], variants["launch-nomask"] = sandbox_bench._helper_variant(base, "n", readable, "bubblewrap")
    name = ""
    try:
        for name, fn in variants.items():
            fn()
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                samples[name].append(fn())
    except sandbox_bench.ContenderFailed as exc:
        print(f"mask_bench: contender {name} failed to run, so nothing is reported: {exc}", file=sys.stderr)
        return 1
    finally:
        sandbox_bench.ZYGOTE.stop()
        shutil.rmtree(base, ignore_errors=True)
    for name, values in samples.items():
        print(f"{name:>15}  {statistics.median(values):8.2f} ms")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

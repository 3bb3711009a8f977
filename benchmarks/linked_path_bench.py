"""What judging a linked path's way costs (core 0.2.4, codespace-fs 0.2.2): the gateway's check
(``PathRules.check``) and codespace-fs's open (``Confinement.open``) of a file reached through a
pnpm-style link (``node_modules/pkg -> ../.pnpm/pkg@1/node_modules/pkg``) and of the same file by
its real path, in this checkout and in another, each in a process of its own, interleaved.

    python benchmarks/linked_path_bench.py --before DIR [--rounds 5] [--calls 2000]

``DIR`` is another checkout of CodeSpace (``git archive REV | tar -x -C DIR``): its core and
codespace-fs come first on the path of its processes. Medians of each process's per-call
medians, in microseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PATHS = {"linked": "node_modules/pkg/lib/index.js", "real": ".pnpm/pkg@1/node_modules/pkg/lib/index.js"}

CHILD = r"""
import os, statistics, sys, time
from codespace.workspace import Workspace
from codespace_fs.resolve import Confinement
ws = Workspace.open(sys.argv[1], state_dir=sys.argv[2])
conf = Confinement(ws, "openat2")
out = []
for rel in sys.argv[4:]:
    path = os.path.join(ws.root_str, rel)
    def one():
        if ws.paths.check(path, "read") is not None:
            raise SystemExit(f"refused: {path}")
        os.close(conf.open(path, os.O_RDONLY, need="read", follow_last=True, action="read").fd)
    for _ in range(200):
        one()
    times = []
    for _ in range(int(sys.argv[3])):
        start = time.perf_counter()
        one()
        times.append(time.perf_counter() - start)
    out.append(statistics.median(times) * 1e6)
print(" ".join(f"{t:.1f}" for t in out))
"""


def tree(base: Path) -> Path:
    ws = base / "ws"
    lib = ws / ".pnpm" / "pkg@1" / "node_modules" / "pkg" / "lib"
    lib.mkdir(parents=True)
    (lib / "index.js").write_text("module.exports = 1;\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "pkg").symlink_to("../.pnpm/pkg@1/node_modules/pkg")
    return ws


def run(checkout: Path | None, ws: Path, state: Path, calls: int) -> list[float]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "plugins" / "fs")])
    done = subprocess.run([sys.executable, "-c", CHILD, str(ws), str(state), str(calls), *PATHS.values()],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"linked_path_bench: a contender failed: {done.stderr[-2000:]}")
    return [float(x) for x in done.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, metavar="DIR", help="another checkout of CodeSpace")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="codespace-linked-") as tmp:
        ws = tree(Path(tmp))
        results: dict[str, list[list[float]]] = {"this": [], "before": []}
        for _ in range(args.rounds):
            results["this"].append(run(None, ws, Path(tmp) / "state", args.calls))
            results["before"].append(run(Path(args.before), ws, Path(tmp) / "state", args.calls))
    print(f"linked_path_bench: {args.rounds} rounds x {args.calls} calls, gateway check + fs open, medians in us")
    for index, name in enumerate(PATHS):
        this = statistics.median(r[index] for r in results["this"])
        before = statistics.median(r[index] for r in results["before"])
        print(f"  {name:7} this {this:7.1f}  before {before:7.1f}  {this / before:5.2f}x")


if __name__ == "__main__":
    main()

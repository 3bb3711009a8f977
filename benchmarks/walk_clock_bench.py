"""What the walk's time bound (``limits.walk_max_ms``, checked every 64 filtered entries) costs,
side by side in one run: codespace-fs's walk (``walking.collect``, no MCP around it) of one
100,000-entry tree, this checkout's against another checkout's ``walking.py``, interleaved.

    python benchmarks/walk_clock_bench.py --before DIR [--files 100000] [--rounds 9]

``DIR`` is another checkout of CodeSpace (for example ``git worktree add /tmp/before e087ff6^``).
Its ``walking.py`` is loaded into this checkout's ``codespace_fs`` package, so only that module
differs. Three walks: with ``.gitignore`` matching (the filtered loop, where the clock is read),
with every hidden name included and no filter (the plain loop), and hidden names left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from codespace.contract import WalkRequest
from codespace.testing import open_workspace

POLICY = "[limits]\nwalk_max_entries = 1000000\nwalk_max_dirs = 100000\nwalk_max_response_bytes = 1073741824\n"
WALKS = {"gitignore": {"gitignore": True}, "plain": {"include_hidden": True}, "no hidden": {"include_hidden": False}}


def _before(checkout: Path):  # noqa: ANN202 - the other checkout's walking module
    source = checkout / "plugins" / "fs" / "codespace_fs" / "walking.py"
    if not source.is_file():
        raise SystemExit(f"walk_clock_bench: {source} does not exist; --before names a checkout of CodeSpace")
    spec = importlib.util.spec_from_file_location("codespace_fs._walking_before", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, files: int) -> None:
    root.mkdir()
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    per_dir = 100
    for d in range(files // per_dir):
        directory = root / f"d{d // 100}" / f"e{d % 100}"
        directory.mkdir(parents=True)
        for f in range(per_dir):
            (directory / f"f{f}.{'log' if f % 10 == 0 else 'py'}").touch()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    from codespace_fs import walking
    from codespace_fs.backend import FsBackend

    contenders = {"this": walking, "before": _before(args.before)}
    base = Path(tempfile.mkdtemp(prefix="walk-clock-bench-"))
    try:
        _tree(base / "ws", args.files)
        backend = FsBackend(open_workspace(base / "ws", state_dir=base / "state", policy=POLICY), "openat2")
        for name, fields in WALKS.items():
            request = WalkRequest(path=str(base / "ws"), **fields)
            times: dict[str, list[float]] = {key: [] for key in contenders}
            counts = set()
            for _ in range(args.rounds):
                for key, module in contenders.items():
                    start = time.perf_counter()
                    out = module.collect(backend.conf, request, backend.limits)
                    times[key].append(time.perf_counter() - start)
                    counts.add((len(out["entries"]), out["truncated"]))
            if len(counts) != 1:
                raise SystemExit(f"walk_clock_bench: the two walks answered differently: {counts}")
            this, before = (statistics.median(times[key]) * 1e3 for key in ("this", "before"))
            print(f"{name:10s} {counts.pop()[0]:7d} entries: this {this:7.1f} ms, before {before:7.1f} ms: "
                  f"{this / before:.3f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

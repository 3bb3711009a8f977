#!/usr/bin/env python3
"""Why apply_patch keeps one journal file per Patcher: the cost of making 0.7 MB durable.

    python benchmarks/journal_flush.py [--dir DIR] [--runs 25]

Two ways, each timed idle and with another process keeping one CPU busy:
- ``new file + fsync`` — create a file, write, fsync (the file system must commit
  its own journal: a new inode, allocated blocks);
- ``reused file + fdatasync`` — overwrite a file whose blocks were written and
  flushed before (no metadata changes, so no commit of the file system's journal).

DIR (default: a temporary directory under the current one) should be on the file
system of the state directory. The page cache is flushed (untimed) before each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SIZE = 700_000


def timed(directory: str, how: str, runs: int, busy: bool) -> float:
    data = os.urandom(SIZE)
    reused = os.path.join(directory, "reused")
    with open(reused, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    times = []
    for i in range(runs):
        os.sync()
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        if spinner:
            time.sleep(0.02)  # let it take its CPU
        try:
            start = time.perf_counter()
            if how == "new":
                path = os.path.join(directory, f"new-{i}")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
            else:
                fd = os.open(reused, os.O_WRONLY)
                os.pwrite(fd, data, 0)
                os.fdatasync(fd)
                os.close(fd)
            times.append(time.perf_counter() - start)
        finally:
            if spinner:
                spinner.kill()
                spinner.wait()
        if how == "new":
            os.unlink(path)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="journal-flush-", dir=args.dir or os.getcwd())
    try:
        print(f"journal_flush: {SIZE} bytes, {args.runs} runs each, medians in ms, in {directory}")
        for busy in (False, True):
            new = timed(directory, "new", args.runs, busy)
            reused = timed(directory, "reused", args.runs, busy)
            print(f"  {'other CPU busy' if busy else 'idle':15s} new file + fsync {new:7.3f}   "
                  f"reused file + fdatasync {reused:7.3f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What rewriting many small files costs on this disk, by method (benchmarks/README-patch.md).

    python benchmarks/write_modes.py [--files 200] [--runs 7] [--dir /var/tmp]

Each run rewrites every file of a freshly written and flushed tree (so no method pays for
another's dirty pages), medians in ms. No CodeSpace code: this is the floor each write
strategy of the FileSystem backend sits on.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import tempfile
import time

OLD = b"x" * 1350
NEW = b"y" * 1380
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", default="/var/tmp")
    args = parser.parse_args()
    base = tempfile.mkdtemp(dir=args.dir, prefix="write-modes-")
    libc = ctypes.CDLL(None, use_errno=True)
    names = [f"{base}/f{i}" for i in range(args.files)]

    def reset() -> None:
        for name in names:
            with open(name, "wb") as f:
                f.write(OLD)
        for name in names:
            for stale in (name + ".t", name + ".fresh"):
                if os.path.exists(stale):
                    os.unlink(stale)
        os.sync()

    def temp_and_rename() -> None:
        for name in names:
            with open(name + ".t", "wb") as f:
                f.write(NEW)
            os.rename(name + ".t", name)

    def truncate_and_write() -> None:
        for name in names:
            with open(name, "wb") as f:  # O_TRUNC, as std::fs::write
                f.write(NEW)

    def temp_and_exchange() -> None:
        for name in names:
            with open(name + ".t", "wb") as f:
                f.write(NEW)
            if libc.renameat2(AT_FDCWD, (name + ".t").encode(), AT_FDCWD, name.encode(), RENAME_EXCHANGE):
                raise OSError(ctypes.get_errno(), "renameat2")
            os.unlink(name + ".t")

    def temp_and_rename_to_a_new_name() -> None:
        for name in names:
            with open(name + ".t", "wb") as f:
                f.write(NEW)
            os.rename(name + ".t", name + ".fresh")

    def overwrite_and_ftruncate() -> None:
        for name in names:
            fd = os.open(name, os.O_WRONLY)
            try:
                os.pwrite(fd, NEW, 0)
                os.ftruncate(fd, len(NEW))
            finally:
                os.close(fd)

    methods = [temp_and_rename, truncate_and_write, temp_and_exchange, temp_and_rename_to_a_new_name,
               overwrite_and_ftruncate]
    times: dict[str, list[float]] = {m.__name__: [] for m in methods}
    try:
        for _ in range(args.runs):
            for method in methods:  # interleaved: machine noise hits all alike
                reset()
                start = time.perf_counter()
                method()
                times[method.__name__].append(time.perf_counter() - start)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, values in times.items():
        print(f"{name:32s} {statistics.median(values) * 1000:7.2f} ms for {args.files} files")


if __name__ == "__main__":
    main()

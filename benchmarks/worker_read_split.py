"""Where a read_file call's time goes inside the server, in-process and through the child worker.

The raw client of ``worker_read_bench.py`` (newline-delimited JSON, no SDK) calls ``read_file``
on a real ``codespace serve`` over stdio; the server is started by this script with timing hooks
on four points of its road, so each call splits into:
- ``before``: from the request line taken off stdin to the file-system backend's ``read_file``
  (JSON, MCP dispatch, argument validation, the gateway's judgement);
- ``backend``: the backend's ``read_file`` (codespace-fs in-process; with the worker, the
  round trip to it: frames both ways, its own judgement and read);
- ``after``: from the backend's answer to the response line written (result, JSON, write).
The client's own p50 is printed beside them. Contenders alternate round by round; medians of
the per-round p50s. It answers one question: how much of the worker's cost a server could hide
by starting the backend's work earlier (the ``before`` part runs in the server while the worker
would be reading) and how much it could not (``after``, and the backend call itself).

    .venv/bin/python benchmarks/worker_read_split.py [--rounds 5] [--calls 600]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLIT_FILE = "CODESPACE_BENCH_SPLIT_FILE"
SPLIT_CALLS = "CODESPACE_BENCH_SPLIT_CALLS"
CONTENDERS = ("in-process", "child", "child, no spin")


def _serve_with_hooks(argv: list[str]) -> None:
    """Run ``codespace serve`` with the timing hooks; the samples go to $CODESPACE_BENCH_SPLIT_FILE
    once $CODESPACE_BENCH_SPLIT_CALLS reads were timed (the server is stopped by then)."""
    import codespace.transports.stdio as stdio
    import codespace_fs.backend as fs_backend
    import codespace_runtime.remote as remote

    wanted = int(os.environ[SPLIT_CALLS])
    taken: list[float] = []  # request lines in, in order (one sequential client)
    pending: list[tuple[float, float, float]] = []  # (line in, backend start, backend end)
    samples: list[tuple[float, float, float]] = []

    take = stdio.StdioConnection._take

    def timed_take(self, line):  # noqa: ANN001, ANN202
        taken.append(time.perf_counter())
        return take(self, line)

    def timed_read(original):  # noqa: ANN001, ANN202
        async def read_file(self, request):  # noqa: ANN001, ANN202
            start = time.perf_counter()
            result = await original(self, request)
            pending.append((taken[-1], start, time.perf_counter()))
            return result
        return read_file

    write_line = stdio.StdioConnection.write_line

    async def timed_write(self, data):  # noqa: ANN001, ANN202
        await write_line(self, data)
        if pending:
            line_in, start, end = pending.pop()
            samples.append((start - line_in, end - start, time.perf_counter() - end))
            if len(samples) == wanted:
                Path(os.environ[SPLIT_FILE]).write_text(json.dumps(samples))

    stdio.StdioConnection._take = timed_take
    stdio.StdioConnection.write_line = timed_write
    fs_backend.FsBackend.read_file = timed_read(fs_backend.FsBackend.read_file)
    remote.RemoteFileSystem.read_file = timed_read(remote.RemoteFileSystem.read_file)

    from codespace.cli import main

    sys.argv = ["codespace", *argv]
    main()


def _round(root: Path, contender: str, n: int, calls: int) -> dict[str, float]:
    import worker_read_bench as bench

    argv = bench._server_argv(root, contender, n)
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve", *argv[3:]]  # not ``-m codespace``
    split = root / f"split-{n}.json"
    os.environ[SPLIT_FILE], os.environ[SPLIT_CALLS] = str(split), str(bench.WARM_UP + calls)
    client = bench._raw_p50(argv, bench.CONTENDERS[contender], calls, 0.0)
    deadline = time.monotonic() + 10
    while not split.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not split.exists():
        raise bench.Failed(f"{contender}: the server wrote no timings")
    samples = json.loads(split.read_text())[bench.WARM_UP:]
    parts = {name: statistics.median(s[i] for s in samples) * 1000 for i, name in enumerate(("before", "backend", "after"))}
    return {**parts, "server": statistics.median(sum(s) for s in samples) * 1000, "client": client}


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        _serve_with_hooks(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=600)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import worker_read_bench as bench

    results: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text(bench.READ_TEXT)
        n = 0
        for round_ in range(args.rounds):
            order = CONTENDERS[round_ % 3:] + CONTENDERS[:round_ % 3]  # each first in turn
            for contender in order:
                n += 1
                try:
                    results[contender].append(_round(root, contender, n, args.calls))
                except bench.Failed as exc:
                    print(f"{contender}: {exc}", file=sys.stderr)
                    return 1
    print(f"read_file split, {args.rounds} rounds x {args.calls} calls, raw client; medians of per-round p50s in us")
    print(f"{'':15} {'before':>8} {'backend':>8} {'after':>8} {'server':>8} {'client':>8}")
    for name, rows in results.items():
        cells = [statistics.median(r[k] for r in rows) * 1000 for k in ("before", "backend", "after", "server", "client")]
        print(f"{name:15} " + " ".join(f"{c:8.1f}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

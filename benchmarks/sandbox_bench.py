"""Sandbox overhead, side by side in one run: /bin/true through the CodeSpace helper versus
the pinned ``codex sandbox`` and bare bubblewrap.

    python benchmarks/sandbox_bench.py [--rounds 30] [--codex PATH]

Every variant is started the same way (``posix_spawn`` + ``waitpid``), interleaved round by
round so load on a shared machine hits all of them alike; the report gives medians and
the ratio helper / ``codex sandbox``. The helper is started exactly as the server starts
it: ``wrap()`` builds the spec, the payloads go through inherited pipes written after
the spawn. Variants:

- ``true``: plain /bin/true
- ``bwrap``: ``bwrap --ro-bind / / --dev /dev --unshare-all -- /bin/true`` (BEHAVIOUR.md's bare bwrap)
- ``python``: ``python -I -S -c 'import posix; posix._exit(0)'``, the floor of a per-command Python helper
- ``codex-ro`` / ``codex-ww``: ``codex sandbox [-c sandbox_mode="workspace-write"] -- /bin/true``
- ``helper-ro``: the helper, bubblewrap engine, policy with nothing writable (upstream read-only)
- ``helper-ww``: the helper, bubblewrap engine, CodeSpace's default policy (workspace writable,
  protected names masked)
- ``helper-ll``: the helper, Landlock engine, default policy
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from codespace_linux_sandbox.backend import LinuxSandbox, interpreter

from codespace.contract import CommandSpec
from codespace.sandboxing import layout_for
from codespace.workspace import Workspace

DEFAULT_CODEX = Path.home() / ".cache/codespace/codex-0.171.0/package/vendor/x86_64-unknown-linux-musl/bin/codex"


def _spawn_wait(argv: list[str], env: dict[str, str], payloads: dict[str, bytes] | None = None) -> float:
    start = time.perf_counter()
    writers = []
    env = dict(env)
    keep = []
    for name, data in (payloads or {}).items():
        r, w = os.pipe()
        os.set_inheritable(r, True)
        env[f"CODESPACE_FD_{name.upper()}"] = str(r)
        keep.append(r)
        writers.append((w, data))
    pid = os.posix_spawn(argv[0], argv, env)
    for r in keep:
        os.close(r)
    for w, data in writers:
        os.write(w, data)
        os.close(w)
    os.waitpid(pid, 0)
    return (time.perf_counter() - start) * 1000


def _helper_variant(base: Path, name: str, policy: str, engine: str):
    ws = base / name
    ws.mkdir()
    (ws / ".git").mkdir()
    policy_path = base / f"{name}.toml"
    policy_path.write_text(policy + f'\n[sandbox]\nengine = "{engine}"\n')
    workspace = Workspace.open(ws, policy_path=policy_path, state_dir=base / f"{name}-state")
    workspace.ensure_state_dir()
    sandbox = LinuxSandbox(engine, workspace.state_dir)
    spec = sandbox.wrap(CommandSpec(argv=["/bin/true"], cwd=str(ws), env={"PATH": "/usr/bin:/bin"}),
                        layout_for(workspace))
    return lambda: _spawn_wait(spec.argv, spec.env, spec.inherit), str(ws)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--codex", default=str(DEFAULT_CODEX))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sandbox-bench-", dir=os.environ.get("BENCH_DIR", str(Path.cwd()))))
    codex_home = base / "codex-home"  # codex refuses to create its helper links under /tmp
    codex_home.mkdir()
    codex_env = {"HOME": str(codex_home), "PATH": "/usr/bin:/bin"}
    variants = {
        "true": lambda: _spawn_wait(["/bin/true"], {}),
        "bwrap": lambda: _spawn_wait(["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "--",
                                      "/bin/true"], {}),
        # the interpreter floor of any per-command Python helper
        "python": lambda: _spawn_wait([interpreter(), "-I", "-S", "-c", "import posix; posix._exit(0)"], {}),
    }
    read_only, _ = _helper_variant(base, "ro", '[filesystem.paths]\n"." = "read"\n', "bubblewrap")
    default, _ww_dir = _helper_variant(base, "ww", "", "bubblewrap")
    landlock, _ = _helper_variant(base, "ll", "", "landlock")
    variants["helper-ro"] = read_only
    variants["helper-ww"] = default
    variants["helper-ll"] = landlock
    if os.access(args.codex, os.X_OK):
        codex_ww = base / "codex-ww"
        codex_ww.mkdir()

        def codex(extra: list[str], cwd: str) -> float:
            here = os.getcwd()
            os.chdir(cwd)
            try:
                return _spawn_wait([args.codex, "sandbox", *extra, "--", "/bin/true"], codex_env)
            finally:
                os.chdir(here)

        variants["codex-ro"] = lambda: codex([], str(base))
        variants["codex-ww"] = lambda: codex(["-c", 'sandbox_mode="workspace-write"'], str(codex_ww))
    else:
        print(f"(codex binary not found at {args.codex}: upstream variants skipped)", file=sys.stderr)
    for fn in variants.values():  # warm-up: bytecode caches, page cache, codex's helper links
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            samples[name].append(fn())
    shutil.rmtree(base, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    report = {"rounds": args.rounds, "median_ms": {k: round(v, 2) for k, v in medians.items()},
              "load_average": os.getloadavg()}
    if "codex-ro" in medians:
        report["ratio"] = {
            "helper-ro / codex-ro": round(medians["helper-ro"] / medians["codex-ro"], 3),
            "helper-ww / codex-ww": round(medians["helper-ww"] / medians["codex-ww"], 3),
            "helper-ww / codex-ro": round(medians["helper-ww"] / medians["codex-ro"], 3),
            "helper-ll / codex-ww": round(medians["helper-ll"] / medians["codex-ww"], 3),
        }
    if args.json:
        print(json.dumps(report))
    else:
        for name, value in report["median_ms"].items():
            print(f"{name:>10}  {value:8.2f} ms")
        for name, value in report.get("ratio", {}).items():
            print(f"{name:>24}  {value:.3f}")
        print(f"load average {report['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sandbox overhead, side by side in one run: /bin/true through the CodeSpace helper versus
the pinned ``codex sandbox`` and bare bubblewrap.

    python benchmarks/sandbox_bench.py [--rounds 30] [--codex PATH]

Every variant is started the same way (``posix_spawn`` + ``waitpid``), interleaved round by
round so load on a shared machine hits all of them alike; the report gives medians and
the ratio helper / ``codex sandbox``. The helper is started exactly as the server starts
it: ``wrap()`` builds the spec, the payloads go through inherited pipes written after
the spawn. Variants:

- ``true``: plain /bin/true
- ``bwrap``: ``bwrap --ro-bind / / --dev /dev --unshare-all -- /bin/true`` (the bare bwrap of docs/upstream-0.171.0.md)
- ``python``: ``python -I -S -c 'import posix; posix._exit(0)'``, the floor of a per-command Python helper
- ``codex-ro`` / ``codex-ww``: ``codex sandbox [-c sandbox_mode="workspace-write"] -- /bin/true``
- ``helper-ro``: the helper, bubblewrap engine, policy with nothing writable (upstream read-only)
- ``helper-ww``: the helper, bubblewrap engine, CodeSpace's default policy (workspace writable,
  protected names masked)
- ``helper-ll``: the helper, Landlock engine, default policy
- ``helper-ww0``: ``helper-ww`` without the process limit (``[sandbox] max_processes = 0``), which
  costs bwrap a wait for the helper's ``prlimit`` before the command starts
- ``helper-ll0``: ``helper-ll`` without the process limit, which costs the Landlock command a user
  namespace of its own (and a root helper the writing of its maps)
- ``launch-ro`` / ``launch-ww`` / ``launch-ll`` / ``launch-ww0`` / ``launch-ll0``: the same five through the fast path,
  ``LinuxSandbox.launch_now`` (what ``launch`` runs): handshake and seccomp program built
  per call, the warm helper forks the per-command helper, ``waitpid`` on it (it is our child)
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

from codespace_linux_sandbox.backend import ZYGOTE, LinuxSandbox, interpreter

from codespace.contract import CommandSpec
from codespace.sandboxing import layout_for
from codespace.workspace import Workspace

DEFAULT_CODEX = Path.home() / ".cache/codespace/codex-0.171.0/package/vendor/x86_64-unknown-linux-musl/bin/codex"


class ContenderFailed(Exception):
    """A contender did not run /bin/true to success: timing it would time its failure."""


def _check(argv0: str, status: int) -> None:
    if status != 0:
        raise ContenderFailed(f"{argv0} exited {os.waitstatus_to_exitcode(status)} (its stderr is above)")


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
    _, status = os.waitpid(pid, 0)
    took = (time.perf_counter() - start) * 1000
    _check(argv[0], status)
    return took


def _helper_variant(base: Path, name: str, policy: str, engine: str, max_processes: int = 4096):
    ws = base / name
    ws.mkdir()
    (ws / ".git").mkdir()
    policy_path = base / f"{name}.toml"
    policy_path.write_text(policy + f'\n[sandbox]\nengine = "{engine}"\n')
    workspace = Workspace.open(ws, policy_path=policy_path, state_dir=base / f"{name}-state")
    workspace.ensure_state_dir()
    sandbox = LinuxSandbox(engine, workspace.state_dir, max_processes=max_processes)
    command = CommandSpec(argv=["/bin/true"], cwd=str(ws), env={"PATH": "/usr/bin:/bin"})
    layout = layout_for(workspace)
    spec = sandbox.wrap(command, layout)
    stdio = (os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY), os.open(os.devnull, os.O_WRONLY))

    def launch() -> float:
        start = time.perf_counter()
        launched = sandbox.launch_now(command, layout, stdio)
        _, status = os.waitpid(launched.pid, 0)
        took = (time.perf_counter() - start) * 1000
        launched.release()
        _check(f"the warm helper's command ({name})", status)
        return took

    return (lambda: _spawn_wait(spec.argv, spec.env, spec.inherit)), launch


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
    for name, policy, engine, limit in (("ro", '[filesystem.paths]\n"." = "read"\n', "bubblewrap", 4096),
                                        ("ww", "", "bubblewrap", 4096), ("ll", "", "landlock", 4096),
                                        ("ww0", "", "bubblewrap", 0), ("ll0", "", "landlock", 0)):
        variants[f"helper-{name}"], variants[f"launch-{name}"] = _helper_variant(base, name, policy, engine, limit)
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
    name = ""
    try:
        for name, fn in variants.items():  # warm-up: bytecode caches, page cache, codex's helper links
            fn()
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                samples[name].append(fn())
    except ContenderFailed as exc:
        # A contender that fails to run fails the benchmark; it is never timed. (Under /tmp,
        # for one, every sandbox hides the workspace behind its private /tmp: use BENCH_DIR.)
        print(f"sandbox_bench: contender {name} failed to run, so nothing is reported: {exc}", file=sys.stderr)
        return 1
    finally:
        ZYGOTE.stop()
        shutil.rmtree(base, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    report = {"rounds": args.rounds, "median_ms": {k: round(v, 2) for k, v in medians.items()},
              "load_average": os.getloadavg()}
    if "codex-ro" in medians:
        report["ratio"] = {
            f"{kind}-{a} / codex-{b}": round(medians[f"{kind}-{a}"] / medians[f"codex-{b}"], 3)
            for kind in ("launch", "helper") for a, b in (("ro", "ro"), ("ww", "ww"), ("ww", "ro"), ("ll", "ww"))
        }
    if args.json:
        print(json.dumps(report))
    else:
        for name, value in report["median_ms"].items():
            print(f"{name:>10}  {value:8.2f} ms")
        for name, value in report.get("ratio", {}).items():
            print(f"{name:>26}  {value:.3f}")
        print(f"load average {report['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

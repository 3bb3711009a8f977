#!/usr/bin/env python3
"""apply_patch speed, side by side with the pinned Codex binary (apply-patch.md §13).

    python benchmarks/patch_bench.py [--runs 9] [--backend auto|test|real] [--processes] [--stdin]

Two cases: one 20,000-line file with one Update section of 200 chunks, and 200
files in 10 directories with one small Update section each. For every run the
tree is rebuilt (untimed), then each contender applies the same patch; runs are
interleaved so machine noise hits all of them alike; medians are reported.

Contenders:
- ``codex`` — the released binary as a whole process (the baseline);
- ``helper`` — ``codespace-apply-patch`` as a whole process, started the way
  CodeSpace starts it (``python -I -S``), upstream mode;
- ``python -I -S (floor)`` — the same interpreter starting and exiting with
  nothing to do, given the same argument (the patch, unless ``--stdin``): the part
  of the helper's time no change to CodeSpace can remove (CPython turns a 64 KB
  argument into ``sys.argv`` for about 1 ms before any code of ours runs; the
  binary reads its argument where the kernel left it);
- ``command`` — the installed ``codespace-apply-patch`` (the script beside this
  interpreter) as an agent types it in a shell: ``site`` on, no plugins handed over,
  none filtered out (no ``CODESPACE_PLUGINS_ALLOW``), so it finds them itself, and no
  state directory given (no ``CODESPACE_STATE_DIR``: it derives the server's default one)
  (``--command PATH`` times another, e.g. in a venv of wheels); ``python (floor)`` is
  the interpreter beside it, with ``site``, starting and exiting, given the same argument;
- ``in-server atomic`` / ``in-server upstream`` — the Patcher backend inside a
  running server: ``plan()`` (what the gateway checks) plus ``apply()``, through
  the FileSystem backend, journal included for atomic mode, until the answer; the
  flush that follows the answer in the background is awaited untimed. One Patcher
  per mode serves every run, as in a server (after one untimed warm-up apply: a
  server's first atomic commit creates its journal file), each run with a new
  patch text so that nothing is parsed in advance;
- ``mcp call`` — the same through a real in-process MCP session (gateway, policy
  check, operation record, JSON both ways, diffs in the result);
- ``raw rewrites (floor)`` — plain Python reading every target and rewriting it in
  place with the expected result: the cost of the I/O alone.

``--processes`` times only the whole processes (``codex``, ``helper``, ``command`` and
the interpreter's floors): more runs in the same time, for the helper's ratio.

``--stdin`` gives every contender the patch on its standard input (from a file, as a shell
gives a heredoc: ``apply_patch <<'EOF'``, the way agents call it) instead of as its argument;
codex then runs as its ``apply_patch`` alias (arg0), the name Codex gives its commands (its
``--codex-run-as-apply-patch`` takes only an argument). CPython decodes a 64 KB argument at
start-up for about 1-2 ms before any of the helper's code runs; this shows what is left.

``--before DIR`` adds ``helper before``: the helper of another checkout of CodeSpace in
``DIR`` (e.g. ``git archive REV | tar -x -C DIR``), its own core and plugins, started the
same way with this environment's third-party packages, in the same interleaved runs; and
``command -c`` / ``command -c before``: the installed command's text run by ``python -c``
over this checkout's and that one's code (the command finds every installed plugin itself,
which the helper is handed).

``--python PATH`` adds ``helper on PATH`` and ``python -I -S on PATH (floor)``: the same helper
and floor started by another interpreter (e.g. a distribution's ``/usr/bin/python3.11`` beside a
pyenv build): how much of the helper's time is the interpreter's build rather than our code.

``--startup`` times the helper's start-up instead, as whole processes started as the
helper is (same interpreter, flags, path and environment), each stage adding one step of
the helper's road to the previous one: the interpreter; the standard-library modules still
on the road (``STDLIB_ON_ROAD``); the gate's workspace; the file-system backend
chosen by the core; the patch modules; the whole helper on the big case. Wall and CPU
medians, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from codespace_patch.conformance.helper import TEST_PLUGINS, helper_argv, helper_env, real_fs_installed
from codespace_patch.conformance.oracle import OracleUnavailable, ensure_oracle


def big_file_case() -> tuple[dict[str, str], str]:
    """~730 KB, 20,000 lines; one Update section, 200 chunks of 2+2 context lines
    replacing one line with two (the shape of apply-patch.md §13's first case)."""
    lines = []
    for i in range(2000):
        lines += [
            f"def function_{i}(arg):",
            f'    """Compute the value for function number {i} from its argument."""',
            f"    value = arg + {i}  # offset by the function number, see the design notes",
            f"    if value > {i * 2}:",
            "        value -= 1",
            f'    result = compute(value, scale={i % 7}, name="function_{i}", retries=3)',
            f'    log("function_{i} returned", result, level="debug")',
            "    return result",
            "",
            "",
        ]
    text = "\n".join(lines) + "\n"
    body = []
    for i in range(0, 2000, 10):
        body += [
            f"@@ def function_{i}(arg):",
            f'     """Compute the value for function number {i} from its argument."""',
            f"     value = arg + {i}  # offset by the function number, see the design notes",
            f"-    if value > {i * 2}:",
            f"+    if value >= {i * 2}:",
            "+        value += 0",
            "         value -= 1",
            f'     result = compute(value, scale={i % 7}, name="function_{i}", retries=3)',
        ]
    patch = "\n".join(["*** Begin Patch", "*** Update File: big.py", *body, "*** End Patch"])
    return {"big.py": text}, patch


def many_files_case() -> tuple[dict[str, str], str]:
    """200 files of 30 lines in 10 directories; one 1-line replacement in each."""
    files = {}
    body = []
    for n in range(200):
        path = f"dir{n % 10}/file{n}.py"
        files[path] = "".join(f"    line {k} of module {n}: representative text\n" for k in range(30))
        body += [f"*** Update File: {path}", "@@", f"     line 14 of module {n}: representative text",
                 f"-    line 15 of module {n}: representative text",
                 f"+    line 15 of module {n}: changed text", f"     line 16 of module {n}: representative text"]
    return files, "\n".join(["*** Begin Patch", *body, "*** End Patch"])


IDLE_S = 0.05
PYTHON_FLOOR = [sys.executable, "-I", "-S", "-c", "pass"]
SITE_FLOOR = [sys.executable, "-c", "pass"]
INSTALLED_COMMAND = Path(sys.executable).with_name("codespace-apply-patch")


def reset(root: Path, files: dict[str, str]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # Untimed: flush the rebuilt tree, so that a contender that flushes its own writes
    # (atomic mode's journal and syncfs) is not charged for writing back the set-up's.
    os.sync()


def expect(root: Path, want: dict[str, bytes]) -> None:
    for rel, data in want.items():
        got = (root / rel).read_bytes()
        if got != data:
            raise SystemExit(f"benchmark result differs from codex's in {rel}")


# name -> CPU seconds (user + system) of each whole-process run: on a shared machine the
# processor time a contender used moves less with the load than its wall time does.
CPU: dict[str, list[float]] = {}


def timed_process(argv: list[str], cwd: Path, env: dict[str, str], name: str | None = None,
                  stdin: Path | None = None) -> float:
    """``stdin``: a file the process reads as its standard input (a heredoc, as a shell gives one)."""
    source = open(stdin, "rb") if stdin is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    start = time.perf_counter()
    try:
        child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=source, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
    finally:
        if stdin is not None:
            source.close()
    stderr = child.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {stderr.decode()[:500]}")
    if name is not None:
        CPU.setdefault(name, []).append(usage.ru_utime + usage.ru_stime)
    return elapsed


async def in_server(root: Path, state: Path, patch: str, mode: str, backend: str, patcher, run: int) -> float:  # noqa: ANN001
    from codespace.contract import PatchRequest
    from codespace.plugins import Plugins
    from codespace.workspace import Workspace

    workspace = Workspace.open(root, state_dir=state)
    fs, _ = Plugins.load(allow=["fs" if backend == "real" else "patch_testfs"], builtins=(), env={}).filesystem(workspace)
    # The Patcher lives as long as the server (its journal file is reused by every commit),
    # but each run's text differs (trailing newlines, which parsing trims), so no run
    # finds the previous one's parse in its cache.
    patch = patch + "\n" * (run + 1)
    request = PatchRequest(patch=patch, mode=mode, cwd=str(workspace.root))
    journal = workspace.ensure_state_dir() / "patch-journal"
    start = time.perf_counter()
    patcher.plan(patch, str(workspace.root))
    await patcher.apply(request, fs, journal)
    elapsed = time.perf_counter() - start
    await patcher.settled()  # untimed: the flush that follows the answer must not land in the next timing
    return elapsed


async def warm_up(root: Path, files: dict[str, str], patch: str, backend: str, patchers: dict) -> None:
    """One untimed apply per mode: what a running server has done before (a first atomic
    commit creates the Patcher's journal file, ≈ 2.5 ms once)."""
    for mode, patcher in patchers.items():
        reset(root, files)
        await in_server(root, root.parent / "state", patch, mode, backend, patcher, -2)


def raw_rewrites(root: Path, want: dict[str, bytes]) -> float:
    """The floor: plain Python reading each target and rewriting it in place with the
    binary's result (no parsing, matching, journal or diffs): what the writes alone cost."""
    start = time.perf_counter()
    for rel, data in want.items():
        path = root / rel
        with open(path, "rb") as f:
            f.read()
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return time.perf_counter() - start


async def mcp_call(client, patch: str) -> float:  # noqa: ANN001
    start = time.perf_counter()
    result = await client.call_tool("apply_patch", {"patch": patch})
    elapsed = time.perf_counter() - start
    if result.is_error:
        raise SystemExit(f"mcp apply_patch failed: {result.content[0].text[:500]}")
    # Untimed: let the server finish the flush that follows its answer (an agent takes far
    # longer than this between calls), so it does not land in the next contender's timing.
    await asyncio.sleep(IDLE_S)
    return elapsed


def _other_checkout(helper_cmd: list[str], other: Path) -> list[str]:
    """The helper's command with this checkout's core and plugin directories on its path
    replaced by those of ``other`` (the third-party packages stay this environment's)."""
    if not (other / "codespace" / "__init__.py").is_file():
        raise SystemExit(f"patch_bench: {other} is not a CodeSpace checkout (no codespace/__init__.py)")
    boot = helper_cmd[-1]
    for directory in [REPO, *sorted((REPO / "plugins").iterdir())]:
        mirrored = other / directory.relative_to(REPO)
        boot = boot.replace(repr(str(directory)), repr(str(mirrored)))
    return [*helper_cmd[:-1], boot]


def _other_python(path: str) -> str:
    """``path`` when it is a Python of this one's version line (the helper's path holds this
    environment's packages and ``.pyc`` files)."""
    try:
        version = subprocess.run([path, "-I", "-S", "-c", "import sys;print(sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError as exc:
        raise SystemExit(f"patch_bench: --python {path}: {exc}") from None
    if version != str(sys.version_info[:2]):
        raise SystemExit(f"patch_bench: --python {path} is Python {version or '?'}, this one {sys.version_info[:2]}")
    return path


def _command_of(checkout: Path, command: Path) -> list[str]:
    """The installed command's own text run with ``python -c`` (``site`` on, as the command
    runs) over the core and plugins of ``checkout``: with ``--before``, this checkout's and the
    other's are both timed this way, so that they differ only in their code."""
    dirs = [str(checkout), *(str(d) for d in sorted((checkout / "plugins").iterdir()) if d.is_dir())]
    body = command.read_text().split("\n", 1)[1]  # without its #! line
    return [str(command.with_name("python")), "-c", f"import sys;sys.path[:0]={dirs!r}\n{body}"]


def _stage_code(boot: str, step: str) -> str:
    """``boot`` (the helper's ``python -c`` line) with its work replaced by ``step``, leaving as
    the helper does (``os._exit``: no interpreter teardown)."""
    return boot.split(";from codespace_patch.cli import")[0] + ";" + step + ";import os;os._exit(0)"


# The standard-library modules still on the helper's road (not frozen into the interpreter):
# os for everything, _ctypes for the hardening's prctl and codespace-fs's openat2. Until
# 2026-12-02 typing, logging and pathlib were on it too (about 23 ms of the helper's 59 ms).
STDLIB_ON_ROAD = "import os, _ctypes"
STAGES = {
    "interpreter (pass)": "pass",
    "+ os, _ctypes": STDLIB_ON_ROAD,
    "+ gate.open_workspace": STDLIB_ON_ROAD + ";from codespace.contract import gate;w=gate.open_workspace('.')",
    "+ gate.filesystem": STDLIB_ON_ROAD + ";from codespace.contract import gate;w=gate.open_workspace('.');"
                         "gate.filesystem(w, [('fs', 'codespace_fs.plugin'), ('patch', 'codespace_patch.plugin')])",
    "+ patch modules": STDLIB_ON_ROAD + ";from codespace.contract import gate;w=gate.open_workspace('.');"
                       "gate.filesystem(w, [('fs', 'codespace_fs.plugin'), ('patch', 'codespace_patch.plugin')]);"
                       "import codespace_patch.cli, codespace_patch.loop_free, codespace_patch.sections",
}


def startup_stages(helper_cmd: list[str], env: dict[str, str], base: Path, runs: int) -> None:
    files, patch = big_file_case()
    root = base / "stages"
    times: dict[str, list[float]] = {}
    for _ in range(runs):
        reset(root, files)
        for name, step in STAGES.items():
            times.setdefault(name, []).append(
                timed_process([*helper_cmd[:-1], _stage_code(helper_cmd[-1], step)], root, env, name))
        times.setdefault("whole helper, big case", []).append(
            timed_process([*helper_cmd, patch], root, env, "whole helper, big case"))
    print(f"\nhelper start-up by stage ({runs} interleaved runs, medians)")
    for name, values in times.items():
        print(f"  {name:28s} wall {statistics.median(values) * 1000:7.1f} ms   cpu "
              f"{statistics.median(CPU[name]) * 1000:7.1f} ms")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--backend", choices=["auto", "test", "real"], default="auto")
    parser.add_argument("--processes", action="store_true", help="time only codex, the helper and python's floor")
    parser.add_argument("--before", metavar="DIR", help="also time the helper of the CodeSpace checkout in DIR")
    parser.add_argument("--command", default=str(INSTALLED_COMMAND),
                        help="the installed codespace-apply-patch to time as 'command' (default: beside this "
                             "interpreter; e.g. one in a venv of wheels)")
    parser.add_argument("--python", metavar="PATH",
                        help="also time the helper and the floor started by this interpreter (same version line)")
    parser.add_argument("--startup", action="store_true", help="time the helper's start-up stage by stage, only")
    parser.add_argument("--stdin", action="store_true",
                        help="give every contender the patch on stdin, as a heredoc (apply_patch <<'EOF'); codex "
                             "runs as its apply_patch alias")
    return parser.parse_args()


def _report(name: str, files: dict[str, str], patch: str, times: dict[str, list[float]]) -> None:
    medians = {k: statistics.median(v) * 1000 for k, v in times.items() if v}
    size = sum(len(t.encode()) for t in files.values()) // 1024
    print(f"\n{name}  ({len(files)} file(s), {size} KB; patch {patch.count(chr(10)) + 1} lines / "
          f"{len(patch.encode()) // 1024} KB)")
    cpu = {k: statistics.median(v) * 1000 for k, v in CPU.items()}
    width = max(20, *map(len, medians))
    for key, value in medians.items():
        ratio = value / medians["codex"]
        spread = f"[{min(times[key]) * 1000:.1f} .. {max(times[key]) * 1000:.1f}]"
        used = f"  cpu {cpu[key]:6.1f} ms {cpu[key] / cpu['codex']:5.2f}x" if key in cpu else ""
        print(f"  {key:{width}s} {value:8.1f} ms  {ratio:5.2f}x codex  {spread}{used}")


def main() -> int:
    args = _arguments()
    backend = ("real" if real_fs_installed() else "test") if args.backend == "auto" else args.backend
    if backend == "test":
        sys.path.insert(0, str(TEST_PLUGINS))
    try:
        codex = ensure_oracle(fetch=True, log=lambda m: print(m, file=sys.stderr))
    except OracleUnavailable as exc:
        print(f"patch_bench: {exc}", file=sys.stderr)
        return 2
    from codespace.testing import build_app, connect
    from codespace.workspace import Workspace
    from codespace_patch.backend import PatchBackend

    base = Path(tempfile.mkdtemp(prefix="patch-bench-"))
    home = base / "home"
    home.mkdir()
    codex_env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    helper_cmd = helper_argv(backend)
    before_cmd = _other_checkout(helper_cmd, Path(args.before)) if args.before else None
    other = _other_python(args.python) if args.python else None
    commands_c: dict[str, list[str]] = {}  # with --before: the command's text over each checkout
    h_env = helper_env(str(base / "helper-state"), str(home), backend)
    command_env = None  # the installed command finds the installed plugins: only over codespace-fs
    command = Path(args.command)
    if backend == "real":
        if not command.exists():
            raise SystemExit(f"patch_bench: {command} is missing: install codespace-patch in this environment")
        command_env = {k: v for k, v in h_env.items() if k not in ("CODESPACE_PLUGINS_ALLOW", "CODESPACE_STATE_DIR")}
        if args.before:
            commands_c = {"command -c": _command_of(REPO, command),
                          "command -c before": _command_of(Path(args.before), command)}
    site_floor = [str(command.with_name("python")), "-c", "pass"] if command.with_name("python").exists() else SITE_FLOOR
    alias = base / "bin" / "apply_patch"  # the name Codex gives commands its apply_patch by (arg0)
    alias.parent.mkdir()
    alias.symlink_to(codex)
    print(f"patch_bench: {args.runs} interleaved runs, medians in ms; FileSystem backend: "
          f"{'codespace-fs' if backend == 'real' else 'tests/plugins patch_testfs (plain os calls)'}; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; the patch "
          f"{'on stdin' if args.stdin else 'as the argument'}")
    if args.startup:
        try:
            startup_stages(helper_cmd, h_env, base, args.runs)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return 0

    async def run_case(name: str, files: dict[str, str], patch: str) -> None:
        root = base / "ws"
        stdin = None
        if args.stdin:  # the same bytes for every contender, from a file as a shell's heredoc is
            stdin = base / "patch.txt"
            stdin.write_text(patch)

        def patch_argv(argv: list[str]) -> list[str]:
            return argv if args.stdin else [*argv, patch]

        codex_argv = [str(alias)] if args.stdin else [str(codex), "--codex-run-as-apply-patch", patch]
        times: dict[str, list[float]] = {k: [] for k in
                                         ("codex", "helper", "helper before", "python -I -S (floor)",
                                          *(() if other is None else (f"helper on {other}", f"python -I -S on {other} (floor)")),
                                          "command",
                                          *commands_c, "python (floor)", "in-server atomic", "in-server upstream", "mcp call",
                                          "raw rewrites (floor)")}
        CPU.clear()
        reset(root, files)
        timed_process([str(codex), "--codex-run-as-apply-patch", patch], root, codex_env)
        want = {rel: (root / rel).read_bytes() for rel in files}
        mcp_root = base / "mcp-ws"
        reset(mcp_root, files)
        app = build_app(mcp_root, state_dir=base / "mcp-state",
                        plugins=("patch", "fs" if backend == "real" else "patch_testfs"))
        limit = Workspace.open(root, state_dir=base / "state").limits.max_file_bytes
        patchers = {mode: PatchBackend(limit) for mode in ("atomic", "upstream")}
        await warm_up(root, files, patch, backend, patchers)
        if other is not None:  # its first run writes its own code cache (one per interpreter)
            reset(root, files)
            timed_process(patch_argv([other, *helper_cmd[1:]]), root, h_env, None, stdin)
            expect(root, want)
        async with connect(app) as client:
            for _ in range(args.runs):
                reset(root, files)
                times["codex"].append(timed_process(codex_argv, root, codex_env, "codex", stdin))
                reset(root, files)
                times["helper"].append(timed_process(patch_argv(helper_cmd), root, h_env, "helper", stdin))
                expect(root, want)
                if before_cmd is not None:
                    reset(root, files)
                    times["helper before"].append(
                        timed_process(patch_argv(before_cmd), root, h_env, "helper before", stdin))
                    expect(root, want)
                times["python -I -S (floor)"].append(
                    timed_process(patch_argv(PYTHON_FLOOR), root, h_env, "python -I -S (floor)"))
                if other is not None:
                    reset(root, files)
                    key = f"helper on {other}"
                    times[key].append(timed_process(patch_argv([other, *helper_cmd[1:]]), root, h_env, key, stdin))
                    expect(root, want)
                    key = f"python -I -S on {other} (floor)"
                    times[key].append(timed_process(patch_argv([other, *PYTHON_FLOOR[1:]]), root, h_env, key))
                if command_env is not None:
                    reset(root, files)
                    times["command"].append(timed_process(patch_argv([str(command)]), root, command_env, "command",
                                                          stdin))
                    expect(root, want)
                    for key, argv in commands_c.items():
                        reset(root, files)
                        times[key].append(timed_process(patch_argv(argv), root, command_env, key, stdin))
                        expect(root, want)
                    times["python (floor)"].append(
                        timed_process(patch_argv(site_floor), root, command_env, "python (floor)"))
                if args.processes:
                    continue
                for mode in ("atomic", "upstream"):
                    reset(root, files)
                    times[f"in-server {mode}"].append(
                        await in_server(root, base / "state", patch, mode, backend, patchers[mode], len(times["codex"]))
                    )
                    expect(root, want)
                reset(mcp_root, files)
                times["mcp call"].append(await mcp_call(client, patch + "\n" * len(times["codex"])))  # no parse cache
                expect(mcp_root, want)
                reset(root, files)
                times["raw rewrites (floor)"].append(raw_rewrites(root, want))
        _report(name, files, patch, times)

    try:
        asyncio.run(run_case("one 20,000-line file, 200 chunks", *big_file_case()))
        asyncio.run(run_case("200 files in 10 directories, 200 Update sections", *many_files_case()))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The linux_sandbox plugin's pin check: ours against a release's ``codex sandbox`` on the same inputs.

Three comparisons, each difference reported with its listed reason (:mod:`.pin_listed`) or none:

- the sandbox surface the binary shows (:mod:`.pin_surface`) against the table of what ours follows;
- the probe matrix (:mod:`.pin_probe`): both policies under upstream's sandbox, and under ours in
  each engine that works here, row by row;
- the bubblewrap argv each side runs (``strace``, :mod:`.pin_trace`), normalised (:mod:`.pin_argv`).

The check has no generated inputs: every run compares all of it (a few seconds), so ``ci``, ``seed``
and ``cases`` change nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from codespace.contract import compare_pin_surface
from codespace.contract import PinCheck, PinCheckRequest, PinDifference, PinReport

from . import pin_argv, pin_listed, pin_sides, pin_surface, pin_trace
from .backend import choose_engine, runtime_paths

PLUGIN = "codespace-linux-sandbox"
COMPONENT = "codex-linux-sandbox"
ENGINES = ("bubblewrap", "landlock")
MARKER = ["/bin/echo", "codespace-pin-check"]
PROXY_NOTE = ("proxy rules not compared: the binary has no command that shows its network proxy's allow/deny "
              "decision for a host; `codex sandbox` starts that proxy only from managed network configuration "
              "(`--transparent-tcp` without it: 'requires a managed network proxy'; `-c network.*` started none). "
              "tests/test_proxy_rules.py holds ours to the rules of docs/upstream-0.171.0.md")


def compare_surface(items: list[str], report: PinReport) -> None:
    compare_pin_surface(items, pin_listed.SURFACE, report)


def compare_probes(engine: str, policy: str, ours: dict[str, str], theirs: dict[str, str],
                   report: PinReport) -> None:
    listed = pin_listed.probe_differences(engine, policy)
    for row in sorted(set(ours) | set(theirs)):
        report.cases += 1
        mine, upstream = ours.get(row, "(missing)"), theirs.get(row, "(missing)")
        case = f"probe {row} ({engine}, {policy})"
        if row in listed and (mine, upstream) == listed[row][:2]:
            report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}", listed=listed[row][2]))
        elif row in listed:
            report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}; listed as ours "
                                                    f"{listed[row][0]}, upstream {listed[row][1]}"))
        elif mine != upstream:
            report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}"))


def compare_argv(policy: str, theirs: list[str], ours: list[str], report: PinReport) -> None:
    for op, side in pin_argv.compare(theirs, ours):
        report.cases += 1
        why = pin_listed.argv_reason(op, side)
        report.differences.append(PinDifference(f"bwrap argv ({policy}): {op}", side, listed=why))
    report.cases += len(set(theirs) & set(ours))


def _engines(report: PinReport) -> list[str]:
    usable = []
    for engine in ENGINES:
        choice = choose_engine(engine)
        if choice.available and choice.engine == engine:
            usable.append(engine)
        else:
            report.notes.append(f"engine {engine} not compared: it does not work here ({choice.detail})")
    return usable


def _matrix(request: PinCheckRequest, base: Path, engines: list[str], report: PinReport) -> None:
    for policy in pin_sides.POLICIES:
        tree = pin_sides.Tree.make(base, f"codex-{policy}")
        theirs = pin_sides.parse_probe(f"codex {request.version} sandbox ({policy})", pin_sides.upstream(
            request.codex, tree, policy, pin_sides.probe_argv(tree)))
        for engine in engines:
            tree = pin_sides.Tree.make(base, f"ours-{engine}-{policy}")
            ours = pin_sides.parse_probe(f"ours ({engine}, {policy})", pin_sides.ours(
                tree, engine, policy, pin_sides.probe_argv(tree)))
            compare_probes(engine, policy, ours, theirs, report)


def _traced(base: Path, name: str, run) -> list[str]:
    prefix = base / f"trace-{name}"
    code, _out, err = run(pin_trace.wrapper(prefix))
    if code != 0:
        raise RuntimeError(f"{name}: the traced command exited {code}: {err.strip()[-300:]}")
    return pin_trace.the_run(pin_trace.bwrap_runs(prefix), MARKER[-1])


def _names(tree: pin_sides.Tree, tail: list[str]) -> pin_argv.Names:
    pairs = [(str(tree.ws), "<ws>"), (str(tree.base), "<base>")]
    if tail and tail[0].endswith("/codex-linux-sandbox"):
        pairs.append((tail[0], "<helper>"))
    return pin_argv.Names(pairs, runtime_paths())


def _argv(request: PinCheckRequest, base: Path, report: PinReport) -> None:
    for policy in pin_sides.POLICIES:
        up_tree = pin_sides.Tree.make(base, f"codex-argv-{policy}")
        up = _traced(base, f"codex-{policy}", lambda w, t=up_tree, p=policy: pin_sides.upstream(
            request.codex, t, p, MARKER, w))
        our_tree = pin_sides.Tree.make(base, f"ours-argv-{policy}")
        mine = _traced(base, f"ours-{policy}", lambda w, t=our_tree, p=policy: pin_sides.ours(
            t, "bubblewrap", p, MARKER, w))
        theirs = pin_argv.normalised(up, MARKER, _names(up_tree, pin_argv.operations(up)[1]))
        ours = pin_argv.normalised(mine, MARKER, _names(our_tree, []))
        compare_argv(policy, theirs, ours, report)


def run(request: PinCheckRequest) -> PinReport:
    report = PinReport(PLUGIN, COMPONENT, request.release)
    if os.geteuid() != 0:
        report.notes.append("run as an unprivileged user: the sysctl row is expected equal (see README)")
    engines = _engines(report)
    if not engines:
        report.unavailable = "no sandbox engine works here: " + "; ".join(report.notes)
        return report
    base = pin_sides.scratch()
    try:
        request.log(f"pin check {COMPONENT}: surface of codex {request.version}")
        compare_surface(pin_surface.surface(request.codex, base / "help-home"), report)
        request.log(f"pin check {COMPONENT}: probe matrix ({', '.join(engines)}; read-only, workspace-write)")
        _matrix(request, base, engines, report)
        if "bubblewrap" in engines and pin_trace.strace() is not None:
            request.log(f"pin check {COMPONENT}: bubblewrap argv (strace)")
            _argv(request, base, report)
        elif "bubblewrap" in engines:
            report.unavailable = "strace is not installed (apt-get install strace): the bwrap argv is not compared"
    except (RuntimeError, OSError, ValueError) as exc:
        report.unavailable = f"{type(exc).__name__}: {exc}"
    finally:
        pin_sides.remove(base)
    report.notes.append(PROXY_NOTE)
    return report


def checks() -> list[PinCheck]:
    return [PinCheck(PLUGIN, COMPONENT, run)]

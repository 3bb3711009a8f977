"""The pty plugin's pin check: terminal sessions through upstream and through ours, compared.

Facts compared per case: the bytes the terminal showed, the exit code the caller
sees, and whether any read exceeded upstream's 8 KiB chunk. Differences we make on
purpose carry the reason from :data:`LISTED` (the README's "Deliberate differences"
lists the same words; a test keeps them in step).
"""

from __future__ import annotations

import signal
import time

from codespace.contract import (OracleUnavailable, PinCheck, PinCheckRequest, PinDifference, PinReport,
                                UpstreamRpc, UpstreamRpcClosed, UpstreamRpcError)

from .pin_cases import CHUNK_CEILING, Case, fixed_cases, generated_cases
from .pin_ours import run_ours
from .pin_upstream import AppServerTerminal, ExecServerTerminal, Seen
from .terminal import PtyTerminal

PLUGIN = "codespace-pty"
COMPONENT = "codex-utils-pty"
CI_SEED = 171
CI_CASES = 28
DEFAULT_CASES = 140

LISTED = {
    "signal": "A command ended by signal N shows exit code 128+N and the signal's name; upstream's terminal "
              "sessions report exit code 1 and lose which signal it was.",
    "read_chunk": "The master is read up to 64 KiB at a time (fewer, larger chunks for bulk output); upstream "
                  "reads 8 KiB at a time.",
}

NOTES = [
    "Not shown by upstream's surfaces, so not compared: that the child leads its own session (pid == pgid; "
    "no upstream method reports a pid), what termination sends (process/terminate and command/exec/terminate "
    "report only that the process ended), and when the master is closed.",
    "Chunking: a pseudo-terminal rarely hands over more than about 4 KiB per read, so the check compares the "
    "8 KiB ceiling (no chunk above it) rather than the chunk sizes themselves.",
    "Cases with a size or a resize go through codex app-server (command/exec); exec-server's process/start "
    "has neither.",
]


def _signal_of(case: Case) -> int | None:
    if case.kind == "interrupt":
        return int(signal.SIGINT)
    if case.kind == "signal":
        word = case.argv[-1].split()[1].lstrip("-")
        return int(word) if word.isdigit() else int(signal.Signals["SIG" + word])
    return None


def compare(case: Case, ours: Seen, upstream: Seen) -> list[PinDifference]:
    """The differences between what the two sides showed for ``case``."""
    found: list[PinDifference] = []
    for side, seen in (("ours", ours), ("upstream", upstream)):
        if seen.problem:
            found.append(PinDifference(case.name, f"{side} did not complete: {seen.problem}"))
    if ours.exit_code != upstream.exit_code:
        signum = _signal_of(case)
        listed = None
        if signum is not None and upstream.exit_code == 1 and ours.exit_code == 128 + signum:
            listed = LISTED["signal"]
        found.append(PinDifference(case.name, f"exit code: ours {ours.exit_code}, upstream {upstream.exit_code}",
                                   listed))
    if ours.output != upstream.output:
        found.append(PinDifference(case.name, f"output: ours {ours.output[:160]!r} ({len(ours.output)} bytes), "
                                              f"upstream {upstream.output[:160]!r} ({len(upstream.output)} bytes)"))
    biggest_ours, biggest_upstream = max(ours.chunks, default=0), max(upstream.chunks, default=0)
    if biggest_upstream > CHUNK_CEILING:
        found.append(PinDifference(case.name, f"upstream read a {biggest_upstream}-byte chunk, over 8 KiB"))
    if biggest_ours > CHUNK_CEILING:
        found.append(PinDifference(case.name, f"ours read a {biggest_ours}-byte chunk, over 8 KiB",
                                   LISTED["read_chunk"]))
    return found


def cases_for(request: PinCheckRequest) -> tuple[list[Case], int]:
    seed = request.seed if request.seed is not None else CI_SEED
    count = request.cases if request.cases is not None else (CI_CASES if request.ci else DEFAULT_CASES)
    return fixed_cases() + generated_cases(seed, count), seed


def run(request: PinCheckRequest) -> PinReport:
    report = PinReport(PLUGIN, COMPONENT, request.release, notes=list(NOTES))
    cases, seed = cases_for(request)
    terminal = PtyTerminal()
    started = time.monotonic()
    try:
        with UpstreamRpc.exec_server(request.codex) as exec_rpc, UpstreamRpc.app_server(request.codex) as app_rpc:
            exec_server, app_server = ExecServerTerminal(exec_rpc), AppServerTerminal(app_rpc)
            for case in cases:
                oracle = app_server if case.needs_app_server else exec_server
                try:
                    upstream = oracle.run(case)
                except UpstreamRpcError as exc:
                    upstream = Seen(problem=str(exc))
                report.differences.extend(compare(case, run_ours(terminal, case), upstream))
                report.cases += 1
    except (UpstreamRpcClosed, OSError) as exc:
        report.unavailable = f"the upstream server stopped answering: {exc}"
    except OracleUnavailable as exc:
        report.unavailable = str(exc)
    report.notes.append(f"{report.cases} cases ({len(cases) - len(fixed_cases())} generated, seed {seed}) "
                        f"in {time.monotonic() - started:.1f} s")
    return report


PIN_CHECK = PinCheck(PLUGIN, COMPONENT, run)

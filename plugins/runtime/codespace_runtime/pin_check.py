"""The runtime plugin's pin checks: ``codex-uds`` and ``codex-process-hardening`` against a release.

- codex-uds: the Unix-socket surface of the binary (:mod:`.pin_surface`) against
  :data:`.pin_listed.SURFACE`, then every socket case of :mod:`.pin_uds` on upstream's
  ``app-server --listen unix://PATH`` and on ours.
- codex-process-hardening: which of the package's executables harden themselves
  (:data:`.pin_listed.HARDENED_EXECUTABLES`), what the hardened one and our worker show in
  ``/proc``, and the exit status of each when a step is made to fail (:mod:`.pin_deny`).

Neither has generated inputs: every run compares all cases (about 20 s), so ``ci``, ``seed`` and
``cases`` change nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from codespace.contract import compare_pin_surface
from codespace.contract import PinCheck, PinCheckRequest, PinDifference, PinReport

from . import pin_hardening, pin_listed, pin_surface, pin_uds

PLUGIN = "codespace-runtime"
UDS = "codex-uds"
HARDENING = "codex-process-hardening"
STEPS = {"dumpable": 5, "core": 7}
"""The step :mod:`.pin_deny` makes fail -> upstream's exit status for it."""
PEER_NOTE = ("peer credentials: not driven against upstream (its socket is reachable only by its own uid and "
             "root); the difference is from codex-uds's source at the pin, and tests/test_sockets.py drives ours")
DIR_RESET_NOTE = ("codex-uds resets an existing socket directory to 0700 (source); at this surface that directory is "
                  "upstream's own /tmp/codex-daemon-<uid>/, shared with every codex run of the uid, so the check does "
                  "not loosen it to watch the reset")


def compare_surface(items: list[str], report: PinReport) -> None:
    compare_pin_surface(items, pin_listed.SURFACE, report)


def compare_socket_case(name: str, ours: pin_uds.Outcome, theirs: pin_uds.Outcome, report: PinReport) -> None:
    report.cases += 1
    mine, upstream = ours.compared(), theirs.compared()
    listed = pin_listed.UDS_DIFFERENCES.get(name)
    case = f"socket: {name}"
    if listed is not None and (mine, upstream) == listed[:2]:
        report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}", listed=listed[2]))
    elif listed is not None:
        report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}; listed as ours "
                                                f"{listed[0]}, upstream {listed[1]}"))
    elif mine != upstream:
        report.differences.append(PinDifference(case, f"ours {mine} ({ours.message}), upstream {upstream} "
                                                f"({theirs.message})"))
    if ours.placement and theirs.placement and ours.placement != theirs.placement:
        why = pin_listed.PLACEMENT if (ours.placement, theirs.placement) == pin_listed.PLACEMENTS else None
        report.differences.append(PinDifference(f"{case}: placement", f"ours {ours.placement}, upstream "
                                                f"{theirs.placement}", listed=why))


def run_uds(request: PinCheckRequest) -> PinReport:
    report = PinReport(PLUGIN, UDS, request.release)
    base = pin_uds.scratch()
    try:
        request.log(f"pin check {UDS}: surface of codex {request.version}")
        compare_surface(pin_surface.surface(request.codex, base / "help-home"), report)
        request.log(f"pin check {UDS}: {len(pin_uds.CASES)} socket cases (app-server --listen unix://PATH, ours)")
        for name in pin_uds.CASES:
            compare_socket_case(name, pin_uds.ours_case(base, name), pin_uds.upstream_case(request.codex, base, name),
                                report)
    except (RuntimeError, OSError, ValueError) as exc:
        report.unavailable = f"{type(exc).__name__}: {exc}"
    finally:
        pin_uds.remove(base)
    report.differences.append(PinDifference("socket: accept from a uid not on the allow-list",
                                            "ours refuses before reading; upstream has no check",
                                            listed=pin_listed.PEER_UID))
    report.notes += [PEER_NOTE, DIR_RESET_NOTE]
    return report


def _effects(argv: list[str], env: dict[str, str], uid: int, home: Path, ready: Path | None = None) -> dict[str, str]:
    """Dumpable, the core limit and LD_* of ``argv`` running as ``uid`` (an unprivileged one)."""
    return pin_hardening.observe(argv, env, uid, home, ready).as_row()


def compare_effects(ours: dict[str, str], theirs: dict[str, str], report: PinReport) -> None:
    for effect in sorted(set(ours) | set(theirs)):
        report.cases += 1
        mine, upstream = ours.get(effect, "(missing)"), theirs.get(effect, "(missing)")
        listed = pin_listed.HARDENING_DIFFERENCES.get(effect)
        case = f"effect: {effect}"
        if listed is not None and (mine, upstream) == listed[:2]:
            report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}", listed=listed[2]))
        elif mine != upstream:
            report.differences.append(PinDifference(case, f"ours {mine}, upstream {upstream}"))


def _hardened(row: dict[str, str]) -> bool:
    return row["dumpable"] == "no" and row["core limit"] == "0 0"


def run_hardening(request: PinCheckRequest) -> PinReport:
    report = PinReport(PLUGIN, HARDENING, request.release)
    base = pin_uds.scratch()
    try:
        uid = pin_hardening.run_uid()
        request.log(f"pin check {HARDENING}: the package's executables (run as uid {uid})")
        staged = pin_hardening.stage(request.codex, base, uid)
        home = base / "home"
        home.mkdir()
        if uid != os.geteuid():
            os.chown(home, uid, uid)
        oracle = None
        for name, (_member, args) in pin_hardening.EXECUTABLES.items():
            env = pin_hardening.voice_env(staged) if name == "codex-voice-host" else {}
            row = _effects([str(staged[name]), *args], env, uid, home)
            report.cases += 1
            hardened, recorded = _hardened(row), pin_listed.HARDENED_EXECUTABLES.get(name)
            if recorded is None or hardened != recorded:
                report.differences.append(PinDifference(
                    f"executable: {name}", f"{'hardens' if hardened else 'does not harden'} itself ({row}); the "
                    f"plugin's table (pin_listed.HARDENED_EXECUTABLES) records {recorded}"))
            if hardened and oracle is None:
                oracle = (name, [str(staged[name]), *args], env, row)
        if oracle is None:
            report.unavailable = "no executable of this release hardens itself: nothing to compare ours with"
            return report
        _compare_worker(request, base, uid, home, oracle, report)
    except (RuntimeError, OSError, ValueError, pin_hardening.Unavailable) as exc:
        report.unavailable = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.notes.append("upstream's removal of LD_* from its running environment cannot be seen from outside: the "
                        "voice host starts no process that would inherit it (the start-up block is compared)")
    return report


def _compare_worker(request: PinCheckRequest, base: Path, uid: int, home: Path, oracle, report: PinReport) -> None:
    name, argv, env, theirs = oracle
    request.log(f"pin check {HARDENING}: our worker against {name}")
    workers = {u: pin_hardening.OurWorker.make(base, u) for u in {uid, os.geteuid()}}
    ours = _effects(workers[uid].argv, workers[uid].env, uid, home, workers[uid].socket)
    workers[uid].reset()
    compare_effects(ours, theirs, report)
    own = workers[os.geteuid()]  # the exit codes under pin_deny, which runs as this uid
    for step, expected in STEPS.items():
        report.cases += 1
        up_code, up_err = pin_hardening.exit_status(argv, env, os.geteuid(), home, step)
        our_code, our_err = pin_hardening.exit_status(own.argv, own.env, os.geteuid(), home, step)
        own.reset()
        if up_code != expected:
            report.differences.append(PinDifference(f"exit: {step} fails", f"upstream's {name} exited {up_code} "
                                                    f"({up_err}), the plugin expects {expected}"))
        if our_code != up_code:
            report.differences.append(PinDifference(f"exit: {step} fails", f"ours exited {our_code} ({our_err}), "
                                                    f"upstream {up_code} ({up_err})"))


def checks() -> list[PinCheck]:
    return [PinCheck(PLUGIN, UDS, run_uds), PinCheck(PLUGIN, HARDENING, run_hardening)]

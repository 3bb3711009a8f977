"""``codespace pins check``: run every installed plugin's conformance check against an
upstream release and say, per plugin and component, whether ours still agrees.

The release's ``codex`` binary is fetched once (``codespace.contract.codex_binary``) and
handed to each check (hook ``codespace_pin_checks``), one after another. The exit status
is 0 only when at least one check ran and every check agreed: an unlisted difference, a
check that raised or could not run, a plugin that failed to load, or no check at all
fails the run. Reports go to stdout, progress to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from .plugins import Pin, PluginInfo, Plugins

RELEASE = re.compile(r"^rust-v(\d+\.\d+\.\d+)$")
HOOK = "codespace_pin_checks"
EXIT_USAGE = 2


class UsageError(Exception):
    """The command cannot start as asked; the message says what to change."""


@dataclass
class Outcome:
    """One check's run, or why there was none."""

    plugin: str
    component: str
    status: str
    """``agrees``, ``differs``, ``unavailable``, ``raised``, ``failed to load`` or ``no check``."""
    report: object | None = None
    detail: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "agrees"

    def as_dict(self) -> dict:
        report = self.report
        return {
            "plugin": self.plugin, "component": self.component, "status": self.status, "detail": self.detail,
            "seconds": round(self.seconds, 1), "cases": getattr(report, "cases", 0),
            "differences": [{"case": d.case, "detail": d.detail, "listed": d.listed}
                            for d in getattr(report, "differences", [])],
            "notes": self.notes,
        }


def parse_release(text: str) -> str:
    """``0.171.0`` for ``rust-v0.171.0``; anything else is a usage error."""
    match = RELEASE.match(text)
    if match is None:
        raise UsageError(f"--release {text!r} is not an upstream tag; write it as rust-vX.Y.Z (e.g. rust-v0.171.0)")
    return match[1]


def _matches(info: PluginInfo, name: str) -> bool:
    return name in (info.name, info.distribution)


def selected_plugins(plugins: Plugins, names: Sequence[str]) -> list[PluginInfo]:
    """The plugins taking part: every one that is not blocked, or those ``--plugin`` names
    (by entry-point or distribution name)."""
    infos = [i for i in plugins.listing() if i.status != "blocked"]
    if not names:
        return infos
    unknown = [n for n in names if not any(_matches(i, n) for i in infos)]
    if unknown:
        known = ", ".join(f"{i.name} ({i.distribution})" for i in infos) or "none"
        raise UsageError(f"--plugin {', '.join(unknown)}: no such plugin is installed and enabled; "
                         f"installed: {known}")
    return [i for i in infos if any(_matches(i, n) for n in names)]


def default_release(infos: Sequence[PluginInfo]) -> str:
    """The release the chosen plugins pin, when they agree on one."""
    pins: set[tuple[str, str]] = {(i.pin.project, i.pin.release) for i in infos if isinstance(i.pin, Pin)}
    if len(pins) == 1:
        return next(iter(pins))[1]
    if not pins:
        raise UsageError("none of the chosen plugins declares an upstream pin; name the release: --release rust-vX.Y.Z")
    listed = "; ".join(f"{i.name}: {i.pin}" for i in infos if i.pin)
    raise UsageError(f"the plugins pin different releases ({listed}); choose one with --release rust-vX.Y.Z "
                     "(or one plugin with --plugin)")


def _judge(plugin: str, component: str, report: object, seconds: float) -> Outcome:
    from .contract.pins import PinReport

    if not isinstance(report, PinReport):
        return Outcome(plugin, component, "raised", None, f"the check returned {type(report).__name__}, "
                       "not a codespace.contract.PinReport", seconds)
    if report.unavailable is not None:
        status, detail = "unavailable", report.unavailable
    elif report.cases <= 0:
        status, detail = "unavailable", "the check compared no case"
    else:
        status, detail = ("agrees" if report.agrees else "differs"), ""
    return Outcome(plugin, component, status, report, detail, seconds, list(report.notes))


def run_check(check: object, request: object) -> Outcome:
    """Run one check; whatever it raises becomes its outcome, never the command's end."""
    from .contract.pins import OracleUnavailable

    plugin, component = getattr(check, "plugin", "?"), getattr(check, "component", "?")
    started = time.monotonic()
    try:
        report = check.run(request)  # type: ignore[attr-defined]
    except OracleUnavailable as exc:
        return Outcome(plugin, component, "unavailable", None, str(exc), time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - a third party's check may raise anything
        return Outcome(plugin, component, "raised", None, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
    return _judge(plugin, component, report, time.monotonic() - started)


def _problem_outcomes(infos: Sequence[PluginInfo], with_checks: set[str]) -> list[Outcome]:
    """Plugins whose check could not be asked for, and pinned plugins that offer none."""
    found = []
    for info in infos:
        plugin = info.distribution or info.name
        if info.status == "failed":
            found.append(Outcome(plugin, "-", "failed to load", detail=info.error or ""))
        elif info.error and info.error.startswith(f"hook {HOOK} "):
            found.append(Outcome(plugin, "-", "raised", detail=info.error))
        elif info.name not in with_checks:
            pin = f"pins {info.pin}" if info.pin else "declares no upstream pin"
            found.append(Outcome(plugin, "-", "no check", detail=pin))
    return found


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """While checks run, whatever they (or their children) print goes to stderr: stdout
    carries only the reports, which ``--json`` readers parse."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(plugins: Plugins, *, release: str | None, names: Sequence[str], ci: bool, seed: int | None,
        cases: int | None, log: Callable[[str], None] = _stderr) -> tuple[str, list[Outcome]]:
    """(release, outcomes): every chosen check run against ``release`` (default: the pin)."""
    from .contract.pins import OracleUnavailable, PinCheckRequest, codex_binary

    infos = selected_plugins(plugins, names)
    version = parse_release(release) if release is not None else parse_release(default_release(infos))
    release = f"rust-v{version}"
    chosen = {i.name for i in infos}
    checks = [(name, check) for name, check in plugins.pin_checks() if name in chosen]
    outcomes = _problem_outcomes(infos, {name for name, _ in checks})
    if not checks:
        return release, outcomes
    try:
        codex = codex_binary(version, log=log)
    except OracleUnavailable as exc:
        return release, [Outcome(c.plugin, c.component, "unavailable", detail=str(exc)) for _, c in checks] + outcomes
    log(f"pins check: against openai/codex {release} ({codex})")
    request = PinCheckRequest(release=release, codex=codex, ci=ci, seed=seed, cases=cases, log=log)
    ran = []
    with _stdout_to_stderr():
        for _, check in checks:
            log(f"pins check: {check.plugin} / {check.component} ...")
            ran.append(run_check(check, request))
    return release, ran + outcomes


def failed(outcomes: Sequence[Outcome]) -> bool:
    ran = [o for o in outcomes if o.status != "no check"]
    return not ran or any(not o.ok for o in ran)


def _difference_lines(report: object) -> list[str]:
    differences = sorted(getattr(report, "differences", []), key=lambda d: d.listed is not None)
    lines = []
    for d in differences:
        lines.append(f"    {'UNLISTED' if d.listed is None else 'listed  '}  {d.case}: {d.detail}")
        if d.listed is not None:
            lines.append(f"              why: {d.listed}")
    return lines


def render(release: str, outcomes: Sequence[Outcome]) -> list[str]:
    lines = []
    for o in outcomes:
        report = o.report
        cases = getattr(report, "cases", 0)
        unlisted = len(getattr(report, "unlisted", []))
        listed = len(getattr(report, "differences", [])) - unlisted
        head = f"{o.plugin} / {o.component}: " if o.component != "-" else f"{o.plugin}: "
        if o.status == "agrees":
            head += f"agrees ({cases} cases{f', {listed} listed difference(s)' if listed else ''}, {o.seconds:.0f} s)"
        elif o.status == "differs":
            head += f"DIFFERS: {unlisted} unlisted, {listed} listed difference(s) ({cases} cases, {o.seconds:.0f} s)"
        else:
            head += f"{o.status.upper() if o.status != 'no check' else 'no pin check'}: {o.detail}"
        lines.append(head)
        lines += _difference_lines(report)
        lines += [f"    note: {n}" for n in o.notes]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to check"
    verdict = "FAILED" if failed(outcomes) else "OK"
    lines.append(f"{verdict}: against openai/codex {release}: {summary}")
    return lines


def main(plugins: Plugins, args: object) -> int:
    """The subcommand: print the reports (text or ``--json``) and return the exit status."""
    try:
        release, outcomes = run(plugins, release=args.release, names=args.plugin or (), ci=args.ci,
                                seed=args.seed, cases=args.cases)
    except UsageError as exc:
        print(f"codespace pins check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"release": release, "ok": not failed(outcomes),
                          "checks": [o.as_dict() for o in outcomes]}, indent=2))
    else:
        print("\n".join(render(release, outcomes)))
    return 1 if failed(outcomes) else 0

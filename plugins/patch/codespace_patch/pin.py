"""codespace-patch's pin check: does ``codespace-apply-patch`` still behave exactly as the
release's own ``codex --codex-run-as-apply-patch``?

Three parts, each reported as differences of one :class:`PinReport`: the package
metadata names openai/codex and the component codex-apply-patch; every upstream
fixture gives its expected tree and the binary's exact outcome; generated patches over
generated trees give identical exit codes, output and trees (atomic mode included).
Run by ``codespace pins check`` (hook ``codespace_pin_checks``) and by
``plugins/patch/pin_check.py``, which prints the same run in more detail.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from codespace.contract import PinCheckRequest, PinReport

    from .conformance.differential import Verdict

PLUGIN = "codespace-patch"
COMPONENT = "codex-apply-patch"
CI_CASES = 200
CI_SEED = 171
DEFAULT_CASES = 2000

_TREE_URL = re.compile(r"^https://github\.com/(?P<project>[^/]+/[^/]+)/tree/(?P<release>[^/\s]+)")


def declared_pin() -> tuple[str | None, str | None, list[str]]:
    """(project, release, components) from this distribution's ``upstream`` URLs."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        urls = distribution(PLUGIN).metadata.get_all("Project-URL") or []
    except PackageNotFoundError:
        return None, None, []
    project = release = None
    components = []
    for entry in urls:
        label, _, url = (part.strip() for part in entry.partition(","))
        match = _TREE_URL.match(url)
        if not label.lower().startswith("upstream") or not match:
            continue
        project, release = project or match["project"], release or match["release"]
        if label.lower() != "upstream":
            components.append(label[len("upstream"):].strip())
    return project, release, components


def metadata_problems(release: str) -> tuple[list[str], list[str]]:
    """(problems, notes): a pin that names another project or lacks the component is a
    problem; a release other than the one checked is a note (a dry run before the pin moves)."""
    project, declared, components = declared_pin()
    if project is None:
        return [f"{PLUGIN} declares no upstream pin ([project.urls] upstream = ...) or is not installed"], []
    problems, notes = [], []
    if project != "openai/codex":
        problems.append(f"pin project is {project}, expected openai/codex")
    if COMPONENT not in components:
        problems.append(f"pin components {components} lack {COMPONENT}")
    if declared != release:
        notes.append(f"the package pins {declared}; checked against {release}")
    return problems, notes


def generated(oracle: Path, seed: int, cases: int, *, workers: int = 2, backend: str = "auto",
              on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    from .conformance.differential import run_cases
    from .conformance.fuzz import generate

    return run_cases([generate(seed, i) for i in range(cases)], oracle, workers=workers, backend=backend,
                     progress=on_verdict)


def upstream_failures(verdicts: list[Verdict]) -> Counter[str]:
    """How often upstream failed with each kind of message."""
    return Counter(v.upstream_error for v in verdicts if v.upstream_code != 0)


def check(request: PinCheckRequest, *, backend: str = "auto", workers: int = 2) -> PinReport:
    """The whole check against ``request.codex``; differences reported, never raised."""
    from codespace.contract import PinDifference, PinReport

    from .conformance.fixture_run import run_fixtures
    from .conformance.fixtures import FixturesMissing, fixtures_dir

    report = PinReport(PLUGIN, COMPONENT, request.release)
    problems, report.notes = metadata_problems(request.release)
    report.differences += [PinDifference("package metadata", p) for p in problems]
    try:
        fixtures = run_fixtures(request.codex, backend)
    except FixturesMissing as exc:
        report.unavailable = str(exc)
        return report
    report.cases += len(fixtures)
    report.differences += [PinDifference(f"fixture {name}", "; ".join(p)[:800]) for name, p in fixtures if p]
    report.notes.append(f"{len(fixtures)} upstream fixtures from {fixtures_dir()}")

    seed = request.seed if request.seed is not None else (CI_SEED if request.ci else random.randrange(1, 10**6))
    count = request.cases if request.cases is not None else (CI_CASES if request.ci else DEFAULT_CASES)
    started, done = time.monotonic(), 0

    def progress(verdict: Verdict) -> None:
        nonlocal done
        done += 1
        if done % 100 == 0:
            request.log(f"  {PLUGIN}: {done}/{count} generated cases ({time.monotonic() - started:.0f} s)")

    verdicts = generated(request.codex, seed, count, workers=workers, backend=backend, on_verdict=progress)
    report.cases += len(verdicts)
    report.differences += [
        PinDifference(f"seed {seed} case {v.case.index} (pin_check.py --replay {seed}:{v.case.index})",
                      v.problem[:800]) for v in verdicts if not v.ok]
    succeeded = sum(v.upstream_code == 0 for v in verdicts)
    kinds = ", ".join(f"{n} {kind!r}" for kind, n in upstream_failures(verdicts).most_common(4))
    report.notes.append(f"{len(verdicts)} generated cases, seed {seed}: upstream succeeded in {succeeded}; "
                        f"most frequent failures: {kinds or 'none'}")
    return report


def pin_checks() -> list:
    from codespace.contract import PinCheck

    return [PinCheck(PLUGIN, COMPONENT, check)]

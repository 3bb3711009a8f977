"""Pin checks: how a plugin shows it still behaves as the upstream release it pins.

A plugin offers one :class:`PinCheck` per upstream component it follows (hook
``codespace_pin_checks``). ``codespace pins check`` fetches the release's own
``codex`` binary (:func:`codex_binary`), hands it to each check with the inputs'
bounds (:class:`PinCheckRequest`), and prints each :class:`PinReport`: a check agrees
when it ran and found no difference that is not listed as deliberate.

A deliberate difference is one the plugin documents (its README says why we differ
from upstream there); the check reports it with ``listed`` set to that reason, so a
pin update still shows it, but it does not fail the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_MEMBER = "package/vendor/x86_64-unknown-linux-musl/bin/codex"


class OracleUnavailable(Exception):
    """The upstream binary of a release could not be fetched or does not run here."""


@dataclass(frozen=True)
class PinDifference:
    """One input on which ours and upstream's behaviour differ."""

    case: str
    """What was compared, precisely enough to replay it (a case id and seed, a probe name)."""
    detail: str
    """What differed: ours against upstream's, shortly."""
    listed: str | None = None
    """Why the difference is deliberate, when the plugin documents it as such; None fails the check."""


@dataclass
class PinReport:
    """What one check found against one release."""

    plugin: str
    component: str
    release: str
    cases: int = 0
    """Inputs compared (a probe, a fixture, a generated case each count one)."""
    differences: list[PinDifference] = field(default_factory=list)
    unavailable: str | None = None
    """Why the check could not run (no oracle, a missing tool); fails the check."""
    notes: list[str] = field(default_factory=list)
    """What upstream's surface cannot show, and other remarks for the reader."""

    @property
    def unlisted(self) -> list[PinDifference]:
        return [d for d in self.differences if d.listed is None]

    @property
    def agrees(self) -> bool:
        return self.unavailable is None and self.cases > 0 and not self.unlisted


@dataclass(frozen=True)
class PinCheckRequest:
    """What a check is asked to compare against."""

    release: str
    """The upstream tag, e.g. ``rust-v0.171.0``."""
    codex: Path
    """That release's ``codex`` executable (linux x64, musl)."""
    ci: bool = False
    """Bounded run: a fixed seed and a case count that fits CI's time budget."""
    seed: int | None = None
    cases: int | None = None
    """Generated cases to run (None: the check's default for ``ci``)."""
    log: Callable[[str], None] = print
    """Progress lines for the operator (to stderr; stdout carries the reports)."""

    @property
    def version(self) -> str:
        """``0.171.0`` for ``rust-v0.171.0``."""
        return self.release.removeprefix("rust-v")


@dataclass(frozen=True)
class PinCheck:
    """A plugin's conformance check for one upstream component."""

    plugin: str
    """The plugin's distribution name, e.g. ``codespace-patch``."""
    component: str
    """The upstream component compared, e.g. ``codex-apply-patch``."""
    run: Callable[[PinCheckRequest], PinReport]
    """Compare; never raise for a difference (report it), raise or set ``unavailable`` when unable."""


def compare_pin_surface(offered: list[str], known: dict[str, tuple[str, str]], report: PinReport,
                    *, table_release: str = "rust-v0.171.0") -> None:
    """Compare the command-line surface a binary offers (subcommands, options: ``offered``) with a
    plugin's table of it (``known``: item -> (``"listed"``, why ours does not offer it) or
    (anything else, what ours has instead), as at ``table_release``). An item the table does not
    know, or one it knows that the binary no longer offers, is an unlisted difference: a pin update
    that adds or removes a subcommand shows."""
    for item in offered:
        report.cases += 1
        if item not in known:
            report.differences.append(PinDifference(f"surface: {item}", "upstream offers it; the plugin's surface "
                                                    "table does not know it"))
        elif known[item][0] == "listed":
            report.differences.append(PinDifference(f"surface: {item}", "upstream offers it, ours does not",
                                                    listed=known[item][1]))
    for item in sorted(set(known) - set(offered)):
        report.cases += 1
        report.differences.append(PinDifference(f"surface: {item}", "this binary does not offer it; the plugin's "
                                                f"surface table records it (as at {table_release})"))


def _cache_root() -> Path:
    base = os.environ.get("CODESPACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "codespace")
    return Path(base)


def _version_of(binary: Path) -> str:
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                              env={"HOME": home, "PATH": "/usr/bin:/bin"})
    return done.stdout.strip()


def _to_stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def codex_binary(version: str, *, fetch: bool = True, log: Callable[[str], None] = _to_stderr) -> Path:
    """The ``codex`` executable of release ``version`` (``0.171.0``), fetched once with
    ``npm pack @openai/codex@<version>-linux-x64`` into ``~/.cache/codespace/codex-<version>``
    (``$CODESPACE_CACHE`` overrides the root). Raises :class:`OracleUnavailable`. ``log``
    defaults to stderr: a server's stdout is its protocol channel."""
    cache = _cache_root() / f"codex-{version}"
    binary = cache / _MEMBER
    expected = f"codex-cli {version}"
    if binary.is_file() and _version_of(binary) == expected:
        return binary
    if not fetch:
        raise OracleUnavailable(f"the codex {version} binary is not in the cache ({binary}) and fetching is off")
    npm = shutil.which("npm")
    if npm is None:
        raise OracleUnavailable(f"npm is not installed: it is needed to fetch the codex {version} binary "
                                f"(npm pack @openai/codex@{version}-linux-x64)")
    cache.mkdir(parents=True, exist_ok=True)
    spec = f"@openai/codex@{version}-linux-x64"
    log(f"pin check: fetching {spec} with npm pack into {cache} (about 170 MB)...")
    # Few, short retries: without a network the check must fail in seconds, not minutes.
    done = subprocess.run([npm, "pack", spec, "--pack-destination", str(cache), "--fetch-retries=2",
                           "--fetch-retry-mintimeout=2000", "--fetch-retry-maxtimeout=10000"],
                          cwd=cache, capture_output=True, text=True, timeout=1800)
    (cache / "pack.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise OracleUnavailable(f"npm pack {spec} failed (exit {done.returncode}); is the npm registry reachable? "
                                f"Last output: {(done.stderr or done.stdout).strip()[-500:]}")
    tarballs = sorted(cache.glob("*.tgz"), key=lambda p: p.stat().st_mtime)
    if not tarballs:
        raise OracleUnavailable(f"npm pack {spec} produced no tarball in {cache}")
    # The one member, copied out by hand: extraction filters (``filter="data"``) exist only from
    # Python 3.11.4 (Debian 12's python3 is 3.11.2), and a regular file is all that is wanted.
    with tarfile.open(tarballs[-1]) as archive:
        try:
            member = archive.getmember(_MEMBER)
        except KeyError:
            raise OracleUnavailable(f"{tarballs[-1]} holds no {_MEMBER}") from None
        if not member.isfile():
            raise OracleUnavailable(f"{_MEMBER} in {tarballs[-1]} is not a regular file")
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".part")
        with archive.extractfile(member) as source, open(partial, "wb") as out:  # type: ignore[union-attr]
            shutil.copyfileobj(source, out)
    partial.chmod(0o755)
    os.replace(partial, binary)
    found = _version_of(binary)
    if found != expected:
        raise OracleUnavailable(f"{binary} reports {found!r}, expected {expected!r}")
    return binary


def pin_check_command_line(checks: PinCheck | list[PinCheck], argv: list[str] | None = None, *,
                           doc: str | None = None, cases_help: str = "generated cases (default: the check's own)") -> int:
    """The ``pin_check.py`` of a plugin: run its check(s) once from the command line.

    ``--ci``, ``--release rust-vX.Y.Z`` (default: the release the plugin's package declares),
    ``--cases``, ``--seed``, ``--no-fetch``, and ``--component`` when there are several checks.
    Reports go to stdout, progress to stderr; exit 0 when every check agrees, 1 on an unlisted
    difference, 2 when one could not run. ``codespace pins check --plugin <distribution>`` runs the
    same checks among the other plugins'."""
    import argparse
    import sys
    from collections import Counter

    checks = [checks] if isinstance(checks, PinCheck) else list(checks)
    by_component = {check.component: check for check in checks}
    pinned = _declared_release(checks[0].plugin)
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ci", action="store_true", help="fixed seed and a bounded case count")
    parser.add_argument("--release", default=pinned, help=f"upstream tag to check against (default {pinned})")
    parser.add_argument("--cases", type=int, default=None, help=cases_help)
    parser.add_argument("--seed", type=int, default=None, help="seed of the generated cases")
    parser.add_argument("--no-fetch", action="store_true", help="fail instead of downloading the binary")
    if len(checks) > 1:
        parser.add_argument("--component", choices=sorted(by_component), action="append",
                            help="check only this component (repeatable; default: all)")
    args = parser.parse_args(argv)
    if not args.release or not args.release.startswith("rust-v"):
        parser.error(f"--release must be an upstream tag like rust-v0.171.0, not {args.release!r}")
    if args.cases is not None and args.cases < 0:
        parser.error("--cases must be 0 or more")

    try:
        codex = codex_binary(args.release.removeprefix("rust-v"), fetch=not args.no_fetch, log=_to_stderr)
    except OracleUnavailable as exc:
        print(f"{checks[0].plugin} {args.release}: could not run: {exc}")
        return 2
    request = PinCheckRequest(args.release, codex, ci=args.ci, seed=args.seed, cases=args.cases, log=_to_stderr)
    worst = 0
    for component in getattr(args, "component", None) or list(by_component):
        report = by_component[component].run(request)
        verdict = "agrees" if report.agrees else ("could not run" if report.unavailable else "DIFFERS")
        listed = Counter(d.listed for d in report.differences if d.listed)
        print(f"{report.plugin} {report.component} {report.release}: {verdict} ({report.cases} cases, "
              f"{sum(listed.values())} listed, {len(report.unlisted)} unlisted)")
        if report.unavailable:
            print(f"  unavailable: {report.unavailable}")
        for difference in report.unlisted:
            print(f"  UNLISTED {difference.case}: {difference.detail}")
        for reason, count in listed.items():
            print(f"  listed   {count:4d} x {reason}")
        for note in report.notes:
            print(f"  note: {note}")
        worst = max(worst, 0 if report.agrees else (2 if report.unavailable else 1))
    return worst


def _declared_release(distribution: str) -> str | None:
    """The release the installed distribution's ``upstream`` project URL names (``rust-vX.Y.Z``)."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata(distribution).get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip() == "upstream" and "/tree/" in url:
            return url.strip().rsplit("/tree/", 1)[1].split("/")[0]
    return None

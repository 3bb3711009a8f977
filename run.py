#!/usr/bin/env python3
"""Bootstrap and run CodeSpace from a checkout, with nothing but python3.

    python3 run.py serve [codespace serve options]   # serve the current directory over stdio
    python3 run.py test  [pytest options]            # the whole test suite (core, then each plugin)
    python3 run.py prepare [workspace options]       # install, then make the first start answer at once
    python3 run.py codespace <command> ...           # any other codespace command

The first run creates ``.venv`` next to this file and installs the core and every
plugin under ``plugins/`` into it (editable); later runs reuse it until a
``pyproject.toml`` changes; after an install, ``serve`` first runs ``codespace
prepare`` (the start that builds the tool listing, about two seconds), so that
the client's session is answered at once. Everything the bootstrap prints goes to
stderr, so ``serve`` keeps stdout clean for the MCP protocol.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent
VENV = Path(os.environ.get("CODESPACE_VENV", REPO / ".venv"))
STAMP = VENV / ".codespace-installed"


def plugin_dirs() -> list[Path]:
    return sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml"))


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for path in [REPO / "pyproject.toml", *(p / "pyproject.toml" for p in plugin_dirs())]:
        digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def _python() -> Path:
    return VENV / "bin" / "python"


def _to_stderr(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=sys.stderr, stderr=sys.stderr)


def ensure_venv() -> tuple[Path, bool]:
    """The venv's python, and whether it was (re)installed just now."""
    fingerprint = _fingerprint()
    if STAMP.exists() and STAMP.read_text() == fingerprint and _python().exists():
        return _python(), False
    print(f"run.py: preparing {VENV} (first run or a pyproject.toml changed)...", file=sys.stderr)
    if not _python().exists():
        _to_stderr([sys.executable, "-m", "venv", str(VENV)])
    pip = [str(_python()), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
    targets = ["-e", f"{REPO}[test]"]
    for plugin in plugin_dirs():
        targets += ["-e", str(plugin)]
    _to_stderr([*pip, *targets])
    drop_setuptools(VENV)
    light_editable_finders(VENV)
    STAMP.write_text(fingerprint)
    return _python(), True


CHECKOUT_FINDER = "_codespace_checkout"
_FINDER_PTH = (
    "# Written by run.py: one finder for the CodeSpace checkout's editable packages, in place of\n"
    "# setuptools' finder module per distribution (each imported pathlib and importlib.util into\n"
    "# every process of this venv: about 9 ms of each start here). A name maps to the directory\n"
    "# holding its package; the interpreter's own path machinery takes it from there, so modules\n"
    "# keep their real paths. A line of code, not a module: importing one would cost a listing\n"
    "# of site-packages at every start.\n"
    "import sys; sys.meta_path.append(type('CheckoutFinder', (), {{'PARENTS': {parents!r}, 'find_spec': "
    "classmethod(lambda cls, name, path=None, target=None: None if name not in cls.PARENTS else "
    "sys.modules['_frozen_importlib_external'].PathFinder.find_spec(name, [cls.PARENTS[name]]))}}))\n"
)


def light_editable_finders(venv: Path) -> None:
    """Serve the checkout's editable distributions with one light finder (``CHECKOUT_FINDER``).

    setuptools writes, per distribution, a ``.pth`` file that imports a finder module of its
    own. Each whose mapping is plain (top-level names, each the name of its directory, no
    namespace packages) is taken over: its ``.pth`` file is removed and its names go into one
    line of ``CHECKOUT_FINDER.pth`` that uses only the interpreter's frozen path machinery.
    Anything else is left as setuptools wrote it. Run after every install (pip writes them
    again)."""
    import ast
    import re

    for site in sorted((venv / "lib").glob("python*/site-packages")):
        mapping: dict[str, str] = {}
        taken: list[Path] = []
        for pth in sorted(site.glob("__editable__.*.pth")):
            found = re.fullmatch(r"import (__editable___\w+_finder); \1\.install\(\)\s*", pth.read_text())
            finder = site / f"{found.group(1)}.py" if found else None
            if finder is None or not finder.is_file():
                continue
            text = finder.read_text()
            names = re.search(r"^MAPPING: dict\[str, str\] = (\{.*\})$", text, re.M)
            spaces = re.search(r"^NAMESPACES: dict\[str, list\[str\]\] = (\{.*\})$", text, re.M)
            if not names or not spaces or ast.literal_eval(spaces.group(1)):
                continue
            entries = ast.literal_eval(names.group(1))
            if not all(os.path.basename(path) == name and "." not in name for name, path in entries.items()):
                continue
            mapping.update(entries)
            taken.append(pth)
        if not taken:
            continue
        parents = {name: os.path.dirname(path) for name, path in sorted(mapping.items())}
        (site / f"{CHECKOUT_FINDER}.pth").write_text(_FINDER_PTH.format(parents=parents))
        for pth in taken:  # removed, not emptied: site reads every .pth file at every start (pip uninstall skips it)
            pth.unlink()


def drop_setuptools(venv: Path) -> None:
    """Uninstall the setuptools that ``venv`` brings on Python 3.11 (3.12's does not): no
    package here needs it at run time (pip builds in an isolated environment), and its
    ``distutils-precedence.pth`` cost every start of the venv's python about 0.6 ms."""
    if any((venv / "lib").glob("python*/site-packages/setuptools-*.dist-info")):
        _to_stderr([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "--yes", "--quiet", "setuptools"])


WORKSPACE_OPTIONS = ("--workspace", "-w", "--policy", "--state-dir")


def workspace_options(args: list[str]) -> list[str]:
    """The workspace options among ``serve``'s arguments (``--x v`` and ``--x=v``)."""
    picked = []
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in WORKSPACE_OPTIONS:
            picked += [arg] if "=" in arg else args[i:i + 2]
    return picked


def lock_suite(suite: Path) -> int | None:
    """With ``$CODESPACE_TEST_SUITE_LOCKS`` (a directory), an exclusive lock on the file there
    named after the suite (``plugins-fs-tests``), held until the descriptor returned is closed.
    CI runs the plugins' isolated suites beside this run and takes the same locks: a suite's
    tests mark their processes with fixed names, so two runs of one suite must not overlap."""
    locks = os.environ.get("CODESPACE_TEST_SUITE_LOCKS")
    if not locks:
        return None
    import fcntl

    fd = os.open(Path(locks) / str(suite.relative_to(REPO)).replace("/", "-"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def run_tests(python: Path, extra: list[str]) -> int:
    """Core tests, then each plugin's own tests; fail on any failure or on 'no tests ran'."""
    suites = [REPO / "tests", *(p / "tests" for p in plugin_dirs() if (p / "tests").is_dir())]
    failed = []
    for suite in suites:
        print(f"run.py: pytest {suite.relative_to(REPO)}", file=sys.stderr)
        lock = lock_suite(suite)
        try:
            code = subprocess.run([str(python), "-m", "pytest", str(suite), *extra], cwd=suite.parent).returncode
        finally:
            if lock is not None:
                os.close(lock)
        if code != 0:  # exit 5 (no tests collected) is a failure too
            failed.append(f"{suite.relative_to(REPO)} (pytest exit {code})")
    if failed:
        print("run.py: FAILED: " + ", ".join(failed), file=sys.stderr)
        return 1
    print(f"run.py: all {len(suites)} suites passed", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    python, fresh = ensure_venv()
    codespace = VENV / "bin" / "codespace"
    if command == "test":
        return run_tests(python, rest)
    if command == "prepare" or (command == "serve" and fresh):
        # The tool listing is built once here, so the client's first tools/list is not kept waiting.
        code = subprocess.run([str(codespace), "prepare", *workspace_options(rest)], stdout=sys.stderr).returncode
        if command == "prepare":
            return code
    if command == "serve":
        args = ["serve", *rest]
    elif command == "codespace":
        args = rest
    else:
        print(f"run.py: unknown command {command!r}; use serve, prepare, test or codespace", file=sys.stderr)
        return 2
    os.execv(codespace, [str(codespace), *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

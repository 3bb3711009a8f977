"""The ripgrep command line for one ``grep`` call.

rg walks the tree itself, so what the policy hides must be kept out of *its walk*
(override globs, which rg checks before it opens a directory or file), not filtered
from its output after it has read the content. Overrides given later win over
earlier ones, so the policy's exclusions come after the agent's globs.
"""

from __future__ import annotations

import os
import shutil
import sys

from codespace.contract import PathRules, ToolError, glob_too_costly

from .grep_models import GrepArgs

_GLOB_SPECIAL = set("*?[]{}\\!")
_IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")


def rg_binary() -> str:
    """The ``rg`` the PyPI ``ripgrep`` wheel installed beside this interpreter (the
    environment's own scripts directory), else where that wheel's record says it put it
    (an interpreter outside the environment that imports its site-packages), else one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "rg")
    if os.access(here, os.X_OK):
        return here
    found = _rg_of_the_wheel() or shutil.which("rg")
    if found is None:
        raise ToolError(
            "grep needs ripgrep (rg), which is not installed. To proceed: ask the operator to install the "
            "codespace-file-search plugin with its dependencies (pip install codespace-file-search).",
            code="backend_missing",
        )
    return found


def _rg_of_the_wheel() -> str | None:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        wheel = distribution("ripgrep")
    except PackageNotFoundError:
        return None
    for file in wheel.files or ():
        if file.name == "rg":
            path = os.path.normpath(str(wheel.locate_file(file)))
            if os.access(path, os.X_OK):
                return path
    return None


def escape_glob(rel: str) -> str:
    """A gitignore-style glob matching exactly the path ``rel`` (rg's globs take
    backslash escapes)."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in rel)


def hidden_below(rules: PathRules, real_dir: str) -> list[str]:
    """Paths below ``real_dir`` (relative to it) that the policy makes unreadable."""
    prefix = real_dir.rstrip("/") + "/"
    return sorted({r.path[len(prefix):] for r in rules.rules if r.access == "none" and r.path.startswith(prefix)})


def _check_globs(globs: list[str], field: str) -> None:
    for glob in globs:
        if not glob or glob.startswith("!") or "\n" in glob or "\0" in glob:
            raise ToolError(
                f"{field} glob {glob!r} is not allowed: globs must be non-empty, one line, and not start with '!'. "
                f"To proceed: put patterns to leave out in exclude, patterns to keep in include.",
                code="invalid_argument", details={"argument": field, "glob": glob},
            )
        why = glob_too_costly(glob)  # as walk refuses it; and rg's argument list stays within the kernel's
        if why is not None:
            raise ToolError(f"{field} holds a glob that is refused because {why}. To proceed: use shorter "
                            "globs (split one into several).", code="invalid_argument",
                            details={"argument": field, "glob": glob[:200]})


def build_argv(args: GrepArgs, hidden: list[str], *, single_file: bool) -> list[str]:
    """rg's argv (after the binary) for ``args``; rg runs in the searched directory
    (or reads the searched file on stdin)."""
    _check_globs(args.include, "include")
    _check_globs(args.exclude, "exclude")
    if args.gitignore:
        leaked = [h for h in hidden if h.rsplit("/", 1)[-1] in _IGNORE_FILES]
        if leaked:
            raise ToolError(
                f"gitignore=true would make ripgrep read {leaked[0]}, which the policy hides. To proceed: search "
                "without gitignore (use exclude globs instead), or search a directory that does not contain it.",
                code="refused", details={"rule": "filesystem.paths", "path": leaked[0]},
            )
    # No --sort: rg's sorted (one-thread) walk opens a directory before the globs can skip it,
    # so a hidden directory would be listed; grep_collect orders the files instead.
    # --binary: rg then marks a binary file's results (binary_offset) instead of dropping the
    # file silently, so the binary files that matched can be counted and their lines withheld.
    # (Its --debug log names every file it skips, but costs up to 7x on a tree with globs.)
    argv = ["--json", "--no-config", "--binary"]
    if args.literal:
        argv.append("--fixed-strings")
    argv += {"sensitive": ["--case-sensitive"], "insensitive": ["--ignore-case"], "smart": ["--smart-case"]}[args.case]
    before = args.context if args.before is None else args.before
    after = args.context if args.after is None else args.after
    argv += ["--before-context", str(before), "--after-context", str(after)]
    if args.include_hidden:
        argv.append("--hidden")
    if args.gitignore:
        argv += ["--no-ignore-parent", "--no-ignore-global", "--no-ignore-exclude", "--no-ignore-dot",
                 "--no-require-git", "--glob", "!.git"]
    else:
        argv.append("--no-ignore")
    if not single_file:
        for glob in args.include:
            argv += ["--glob", glob]
        for glob in args.exclude:
            argv += ["--glob", "!" + glob]
        for rel in hidden:
            argv += ["--glob", "!/" + escape_glob(rel)]
    argv += ["--regexp", args.pattern]
    argv.append("-" if single_file else ".")
    return argv

"""The sandbox surface upstream's binary shows: ``codex sandbox``'s options and subcommands, the
helper's options (the same binary started as ``codex-linux-sandbox``) and ``codex stdio-to-uds``.

A release that adds or removes an option here (0.171.0 added ``--transparent-tcp`` to both and
removed ``stdio-to-uds``) changes what a sandboxed command can be asked to do, so the check
compares this surface with the table in :mod:`.pin_listed`, item by item.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_OPTION = re.compile(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)")
_COMMAND = re.compile(r"^  ([a-z][a-z0-9-]*)\s{2,}")
HELP_TIMEOUT_S = 60


def _help(codex: Path, argv: list[str], home: Path, arg0: str | None = None) -> str:
    done = subprocess.run([arg0 or str(codex), *argv], executable=str(codex), capture_output=True, text=True,
                          timeout=HELP_TIMEOUT_S, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{arg0 or 'codex'} {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def _sections(text: str) -> tuple[list[str], list[str]]:
    """(long options, subcommands) of a clap help text."""
    options, commands, section = [], [], ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.split(":")[0]
            continue
        if section == "Options" and (match := _OPTION.match(line)):
            options.append(match.group(1))
        elif section == "Commands" and (match := _COMMAND.match(line)):
            commands.append(match.group(1))
    return options, commands


def surface(codex: Path, home: Path) -> list[str]:
    """The items, e.g. ``codex sandbox --transparent-tcp``, ``codex-linux-sandbox --no-proc``."""
    home.mkdir(parents=True, exist_ok=True)
    options, commands = _sections(_help(codex, ["sandbox", "--help"], home))
    items = [f"codex sandbox {o}" for o in options] + [f"codex sandbox {c}" for c in commands]
    helper_options, _ = _sections(_help(codex, ["--help"], home, arg0="codex-linux-sandbox"))
    if not helper_options:
        raise RuntimeError("the binary started as codex-linux-sandbox showed no options (is it the codex CLI?)")
    items += [f"codex-linux-sandbox {o}" for o in helper_options]
    # An unknown subcommand is taken as a prompt, so its --help is the top level's: look for its own usage.
    if "Usage: codex stdio-to-uds" in _help(codex, ["stdio-to-uds", "--help"], home):
        items.append("codex stdio-to-uds")
    return items

"""The Unix-socket surface upstream's binary shows: the ``unix://`` values ``--listen`` takes
(app-server, exec-server), the options that connect to a socket (``app-server proxy --sock``) and
``codex stdio-to-uds`` (0.169.0 has it, 0.171.0 removed it). Each item is compared with
:data:`.pin_listed.SURFACE`, so a release that adds or removes one shows as a difference.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

HELP_TIMEOUT_S = 60
_OPTION = re.compile(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)")
_VALUE = re.compile(r"`(unix://[A-Z]*)`")


def _help(codex: Path, argv: list[str], home: Path) -> str:
    done = subprocess.run([str(codex), *argv], capture_output=True, text=True, timeout=HELP_TIMEOUT_S,
                          env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"codex {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def options(text: str) -> dict[str, str]:
    """Each long option of a clap help text and its description (the lines up to the next option)."""
    found: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = _OPTION.match(line)
        if match:
            current = match.group(1)
            found[current] = line
        elif current is not None:
            found[current] += "\n" + line
    return found


def surface(codex: Path, home: Path) -> list[str]:
    home.mkdir(parents=True, exist_ok=True)
    items = []
    for command in ("app-server", "exec-server"):
        listen = options(_help(codex, [command, "--help"], home)).get("--listen", "")
        items += [f"codex {command} --listen {value}" for value in _VALUE.findall(listen)]
    proxy = options(_help(codex, ["app-server", "proxy", "--help"], home))
    items += [f"codex app-server proxy {name}" for name, text in proxy.items() if "socket" in text.lower()]
    # An unknown subcommand is taken as a prompt, so its --help is the top level's: look for its own usage.
    if "Usage: codex stdio-to-uds" in _help(codex, ["stdio-to-uds", "--help"], home):
        items.append("codex stdio-to-uds")
    return items

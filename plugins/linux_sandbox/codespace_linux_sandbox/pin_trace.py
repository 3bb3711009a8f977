"""The bubblewrap argv each side runs, seen with ``strace -ff -e trace=execve,write``.

Upstream passes bwrap its arguments on the command line; ours hands them over in a memfd
(``bwrap --args FD``, so the command's environment never shows in ``ps``), so for ours the
arguments are the data the helper wrote to that descriptor before the ``execve``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_CALL = re.compile(r"^(execve|write)\((.*)\)\s+=\s+(-?\d+)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f", '"': '"', "\\": "\\"}


def strace() -> str | None:
    return shutil.which("strace")


def wrapper(prefix: Path) -> tuple[str, ...]:
    """The argv prefix that traces a run into ``prefix.<pid>`` files (one per process: no interleaving)."""
    tool = strace()
    if tool is None:
        raise RuntimeError("strace is not installed (apt-get install strace): the argv comparison needs it")
    return (tool, "-ff", "-qq", "-s", "1048576", "-e", "trace=execve,write", "-o", str(prefix))


def _string(text: str, start: int) -> tuple[str, int]:
    """The C-escaped string literal beginning at ``text[start]`` (a quote) and the index after it.
    strace escapes each byte that is not printable ASCII, so the bytes are gathered, then decoded."""
    out, i = bytearray(), start + 1
    while text[i] != '"':
        if text[i] != "\\":
            out += text[i].encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = text[i + 1]
        if nxt in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[nxt].encode()
            i += 2
        elif nxt == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:  # octal, one to three digits
            digits = re.match(r"[0-7]{1,3}", text[i + 1:i + 4]).group(0)
            out.append(int(digits, 8))
            i += 1 + len(digits)
    return out.decode("utf-8", "surrogateescape"), i + 1


def _strings(text: str) -> list[str]:
    found, i = [], 0
    while (i := text.find('"', i)) >= 0:
        value, i = _string(text, i)
        found.append(value)
    return found


def calls(prefix: Path) -> list[tuple[int, str, list[str], str]]:
    """(pid, call, string arguments, raw arguments) for each successful execve and write, per process in order."""
    found = []
    for path in sorted(prefix.parent.glob(prefix.name + ".*")):
        pid = int(path.suffix[1:])
        for line in path.read_text(errors="surrogateescape").splitlines():
            match = _CALL.match(line)
            if match and int(match.group(3)) >= 0:
                found.append((pid, match.group(1), _strings(match.group(2)), match.group(2)))
    return found


def bwrap_runs(prefix: Path) -> list[list[str]]:
    """Every bwrap the traced processes started, as the argument list bwrap acted on (``--args FD``
    expanded from what was written to FD: by the process itself or, as posix_spawn starts bwrap in a
    new process, by the nearest parent before it)."""
    traced = calls(prefix)
    written: dict[tuple[int, int], list[str]] = {}
    for pid, call, strings, raw in traced:
        if call == "write":
            written.setdefault((pid, int(raw.split(",", 1)[0])), []).append(strings[0] if strings else "")
    runs = []
    for pid, call, strings, _raw in traced:
        if call != "execve" or not strings or Path(strings[0]).name != "bwrap":
            continue
        argv = strings[2:]  # after the path and argv[0]
        if len(argv) >= 2 and argv[0] == "--args":
            fd = int(argv[1])
            writers = [p for (p, f) in written if f == fd and p <= pid]
            data = "".join(written[(max(writers), fd)]) if writers else ""
            argv = data.split("\0")[:-1] + argv[2:]
        runs.append(argv)
    return runs


def the_run(runs: list[list[str]], marker: str) -> list[str]:
    """The bwrap run that started the command (its argv ends with ``marker``), not a preflight."""
    for argv in runs:
        if argv and argv[-1] == marker:
            return argv
    raise RuntimeError(f"no bwrap run ended with {marker!r} in the trace ({len(runs)} bwrap runs seen)")

"""Reading /proc/<pid>/stat, the one place that parses it."""

from __future__ import annotations

import os

ProcRow = tuple[int, int, int, int]
"""(pid, ppid, pgid, sid) of one live process."""


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None
    if the process is gone. The name may contain spaces and parentheses, so the
    fields resume after the last ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2 :].split()


def start_ticks(pid: int, *, living: bool = False) -> int | None:
    """When ``pid`` started, in clock ticks since boot (with the pid, it names one process).
    ``living``: None for a zombie too, which keeps its entry and start time only until its
    parent reaps it."""
    fields = stat_fields(pid)
    if not fields or (living and fields[0] == b"Z"):
        return None
    return int(fields[19])


def table() -> list[ProcRow]:
    """(pid, ppid, pgid, sid) of every live, non-zombie process, from one pass over /proc.

    A stop of several sessions asks "what is left of any of them?" once with this rather
    than once per session: each pass costs milliseconds (one open and read per process)."""
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 2 :].split(maxsplit=4)
        if fields[0] != b"Z":
            rows.append((int(entry), int(fields[1]), int(fields[2]), int(fields[3])))
    return rows

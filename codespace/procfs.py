"""Reading /proc/<pid>/stat, the one place that parses it."""

from __future__ import annotations


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


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (with the pid, it names one process)."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None

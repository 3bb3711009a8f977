"""Cgroup directories as files: writing a control file, listing what a cgroup holds, killing
it without ``cgroup.kill``, removing a tree. Shared by the per-command cgroups (``tracking``)
and their process-limit mirrors (``pids_limit``); either hierarchy version."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

KILL_WAIT_S = 2.0


def write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def procs(group: Path) -> list[int]:
    """Every process in ``group`` and the cgroups below it."""
    pids: list[int] = []
    for dirpath, _, files in os.walk(group):
        if "cgroup.procs" in files:
            try:
                pids += [int(x) for x in Path(dirpath, "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                pass
    return pids


def kill_procs(group: Path) -> None:
    """SIGKILL what ``group`` and those below it hold, round after round until none is left (a
    forking process is caught by the next round) or KILL_WAIT_S has passed: for kernels and
    hierarchies without ``cgroup.kill`` (before 5.14, and cgroup v1)."""
    deadline = time.monotonic() + KILL_WAIT_S
    while (pids := procs(group)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


def remove_tree(group: Path) -> bool:
    """rmdir ``group`` and its children, deepest first; False if any is still in use."""
    ok = True
    for dirpath, dirnames, _ in os.walk(group, topdown=False):
        for name in dirnames:
            try:
                os.rmdir(os.path.join(dirpath, name))
            except OSError:
                ok = False
    try:
        os.rmdir(group)
    except FileNotFoundError:
        pass
    except OSError:
        ok = False
    return ok

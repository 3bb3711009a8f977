"""Kill everything a command started: its process group and its whole session.

Children are started as session leaders (pid == pgid == sid). Shells with job
control move jobs into their own process groups, so killing the group alone can
miss them; every process still in the leader's session is found through /proc
and killed too. Only a process that calls setsid() itself leaves the session: the command's
cgroup (tracking.py), the keeper's subreaper tree (keeper.py) or the sandbox's
PID namespace is what catches those.
"""

from __future__ import annotations

import os
import signal

from ..procfs import ProcRow, table
from .keeper import descendants  # one walk of /proc's parent links; the keeper script imports nothing


def _members(leader: int, procs: list[ProcRow] | None = None) -> list[tuple[int, int]]:
    """(pid, pgid) of live processes in the group or session ``leader`` leads."""
    return [(pid, pgid) for pid, _, pgid, sid in (table() if procs is None else procs) if leader in (pgid, sid)]


def members(leader: int, procs: list[ProcRow] | None = None) -> list[int]:
    """Live (non-zombie) processes in the process group or session led by ``leader``."""
    return [pid for pid, _ in _members(leader, procs)]


def kill_session(leader: int, signum: int = signal.SIGKILL, procs: list[ProcRow] | None = None) -> int:
    """Signal the group and every session member; returns how many were signalled.
    ``procs`` is a :func:`~codespace.procfs.table` taken for several calls at once."""
    if leader <= 1 or leader == os.getpid():
        raise ValueError(f"refusing to signal process group {leader}")
    sent = 0
    group_signalled = False
    try:
        os.killpg(leader, signum)
        sent += 1
        group_signalled = True
    except (ProcessLookupError, PermissionError):
        pass
    for pid, pgid in _members(leader, procs):
        if pid == os.getpid() or (group_signalled and pgid == leader):
            continue  # the group signal reached it: a second one could be seen twice
        try:
            os.kill(pid, signum)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def kill_tree(root: int) -> int:
    """SIGKILL every descendant of ``root`` (not ``root``), round after round until none is
    left: used on a keeper before it is killed, while orphans still come back to it."""
    sent = 0
    for _ in range(100):
        found = descendants(root)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                sent += 1
            except OSError:
                pass
    return sent

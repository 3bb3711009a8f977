"""Kill the process groups that operations of a dead server left behind."""

from __future__ import annotations

import logging
import os
import signal

from .processes.kill import kill_session, members
from .store import OperationRecord, proc_start_ticks

log = logging.getLogger(__name__)


def group_is_ours(pgid: int, leader_start: int | None) -> bool:
    """True when group ``pgid`` is still the one we recorded.

    Linux never hands out a pid that is in use as a process-group id, so while any
    member of our group lives, ``pgid`` cannot name a new process. The group is a
    different one only if a process with pid ``pgid`` exists and started at another
    time than our leader did. Without a recorded start time nothing says the group is
    ours, and it is left alone: a record that names a group only (written by something
    other than this server) must not make it kill whatever has that number now.
    """
    if leader_start is None:
        return False
    leader_now = proc_start_ticks(pgid)
    if leader_now is not None:
        return leader_now == leader_start
    return bool(members(pgid))


def reap(records: list[OperationRecord]) -> list[int]:
    """SIGKILL every recorded group (and its session) that still exists and is ours;
    return the groups killed."""
    killed = []
    for record in records:
        if record.pgid is None or record.pgid <= 1 or record.pgid == os.getpgid(0):
            continue
        if not group_is_ours(record.pgid, record.pgid_start):
            continue
        if not kill_session(record.pgid, signal.SIGKILL):
            continue
        log.warning("reaped process group %s left by interrupted operation %s", record.pgid, record.operation_id)
        killed.append(record.pgid)
    return killed

"""Who owns what the file tools create.

A server running as root creates files owned by root; in a user's workspace that leaves
files the user's own commands cannot change (a sandbox runs them as the workspace owner).
So, as root, a new file or directory takes the owner and group of the directory it is
created in, as if that directory's owner had made it. Only ever applied to a descriptor
this process just created or opened without following links: never by name, which a
concurrent rename could point at another file.
"""

from __future__ import annotations

import os

AS_ROOT = os.geteuid() == 0
"""Whether anything here applies: only a server running as root creates files for others."""


def take_parent_owner(fd: int, dirfd: int) -> None:
    """Give the new object open as ``fd`` the owner of the directory open as ``dirfd``."""
    if not AS_ROOT:
        return
    parent = os.fstat(dirfd)
    if parent.st_uid or parent.st_gid:
        os.fchown(fd, parent.st_uid, parent.st_gid)

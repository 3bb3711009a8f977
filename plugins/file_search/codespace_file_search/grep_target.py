"""Open what ``grep`` searches, and check the object actually opened.

The gateway has checked the path as written and where it resolved; between that
check and rg's start the path could be swapped for a link. So the directory (or
file) is opened here, its real path read back from the descriptor and checked
against the policy, and rg is pointed at *that object*: it starts in the opened
directory (through ``/proc/<pid>/fd``) or reads the opened file on stdin.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from codespace.contract import FsError, PathRules, Refused

O_PATH = getattr(os, "O_PATH", 0o10000000)
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


@dataclass
class Target:
    fd: int
    real: str
    is_dir: bool
    name: str
    """How a single file's matches name it (its base name); empty for a directory."""

    def close(self) -> None:
        os.close(self.fd)


def open_target(path: str, rules: PathRules, *, refuse_hardlinks: bool = False) -> Target:
    try:
        fd = os.open(path, O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        hint = ". To proceed: check the path with list_dir or walk" if exc.errno == errno.ENOENT else ""
        raise FsError.from_os(exc, path, "search", hint.lstrip(". ")) from None
    try:
        return _checked(fd, path, rules, refuse_hardlinks)
    except BaseException:
        os.close(fd)
        raise


def _checked(fd: int, path: str, rules: PathRules, refuse_hardlinks: bool) -> Target:
    real = os.readlink(f"/proc/self/fd/{fd}")
    refusal = rules.check_exact(real, "read")
    if refusal is not None:
        raise type(refusal)(refusal.rule, f"refused by policy: {path} leads to {real}: {refusal.message}")
    st = os.fstat(fd)
    mode = st.st_mode
    if refuse_hardlinks and stat.S_ISREG(mode) and st.st_nlink > 1:
        raise Refused(
            "filesystem.hardlinks", f"refused by policy: {path} has {st.st_nlink} hard links, and the policy forbids "
            "reading such files (rule filesystem.hardlinks = 'refuse'). To proceed: search a copy with a single link, "
            "or ask the operator to set filesystem.hardlinks = 'allow'")
    if stat.S_ISDIR(mode):
        return Target(fd, real, True, "")
    if not stat.S_ISREG(mode):
        what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise FsError(f"cannot search {path}: it is {what}. To proceed: search a directory or a regular file.",
                      path=path, code="not_regular")
    # Reopening the O_PATH descriptor opens the same inode, whatever the path names now.
    readable = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    os.close(fd)
    if not stat.S_ISREG(os.fstat(readable).st_mode):  # pragma: no cover - same inode as checked
        os.close(readable)
        raise FsError(f"cannot search {path}: it changed while being opened", path=path)
    return Target(readable, real, False, os.path.basename(real))

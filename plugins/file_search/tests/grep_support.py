"""Helpers the grep tests share: a kernel witness of what was opened, rg processes alive."""

from __future__ import annotations

import ctypes
import os
import struct

IN_ACCESS = 0x001
IN_OPEN = 0x020
IN_NONBLOCK = os.O_NONBLOCK

_libc = ctypes.CDLL(None, use_errno=True)


class OpenWatch:
    """inotify on files and directories: did anything open or read them? (The kernel
    reports the open of a watched directory and of every file inside it.)"""

    def __init__(self, *paths: os.PathLike | str) -> None:
        self.fd = _libc.inotify_init1(IN_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        for path in paths:
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(os.fspath(path)), IN_OPEN | IN_ACCESS)
            assert wd >= 0, os.strerror(ctypes.get_errno())

    def events(self) -> list[tuple[int, str]]:
        found = []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return found
        offset = 0
        while offset < len(data):
            _wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16: offset + 16 + length].rstrip(b"\0").decode(errors="replace")
            found.append((mask, name))
            offset += 16 + length
        return found

    def close(self) -> None:
        os.close(self.fd)


def rg_children() -> list[int]:
    """Processes named rg whose parent is this test process."""
    me = str(os.getpid())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)
            comm = fields[0].split("(", 1)[1]
            ppid = fields[1].split()[1]
        except (OSError, IndexError):
            continue
        if comm == "rg" and ppid == me:
            found.append(int(pid))
    return found

"""The descriptors of a stdio connection: claimed from fds 0 and 1, and read as lines.

Without the event loop (nothing here imports anyio), so that the opening of a connection
(:mod:`.stdio_opening`) can serve before the loop exists. While claimed, fd 0 reads
/dev/null and fd 1 points at stderr: a stray ``print`` or a child process can never
write into the protocol channel.
"""

from __future__ import annotations

import fcntl
import os
import select
import stat

from .wire import ID_EDGE_BYTES, MAX_LINE_BYTES, TOO_LONG, DroppedLine


READ_CHUNK = 1 << 16  # the most one read of the client's input takes


def pollable(fd: int) -> bool:
    # epoll refuses regular files, directories and some devices (/dev/null: EPERM); those
    # are read on a thread instead.
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    try:
        with select.epoll() as probe:
            probe.register(fd, select.EPOLLIN)
    except OSError:
        return False
    return True


class Claim:
    """Private duplicates of fds 0/1 for the protocol; the originals diverted."""

    def __init__(self) -> None:
        self.read_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        self.write_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        self._saved = (fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3), fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3))
        devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        self.read_pollable = pollable(self.read_fd)
        self.write_pollable = pollable(self.write_fd)
        self._flags = {}
        for fd, can_poll in ((self.read_fd, self.read_pollable), (self.write_fd, self.write_pollable)):
            if can_poll:
                self._flags[fd] = os.get_blocking(fd)
                os.set_blocking(fd, False)

    def release(self) -> None:
        for fd, blocking in self._flags.items():
            try:
                os.set_blocking(fd, blocking)  # the description may be shared with a terminal
            except OSError:
                pass
        os.dup2(self._saved[0], 0)
        os.dup2(self._saved[1], 1)
        for fd in (*self._saved, self.read_fd, self.write_fd):
            os.close(fd)




class Lines:
    """The client's input cut into lines, in time linear in its length: the line in progress
    grows in a bytearray (``bytes +=`` copied it whole at every 64 KiB read: 446 s to take a
    line of 300 MB). A line past :data:`MAX_LINE_BYTES` is dropped as it arrives, never held,
    and comes out as :data:`TOO_LONG` (a :class:`DroppedLine` keeping its first and last
    bytes, where its id can be found)."""

    def __init__(self) -> None:
        self.pending = bytearray()
        self.dropping = False
        self.head = b""  # a dropped line's first and last bytes, where its id usually stands
        self.tail = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes; at end of input (``chunk`` empty) the last line
        without its newline still counts."""
        if not chunk:
            lines = [self._finish()]
            self.pending = bytearray()
            return lines
        last = chunk.rfind(b"\n")
        if last < 0:
            self._add(chunk)
            return []
        first = chunk.find(b"\n")
        self._add(chunk[:first])
        lines = [self._finish()]
        if last > first:
            lines += chunk[first + 1:last].split(b"\n")  # each shorter than the chunk
        self.pending = bytearray()
        self._add(chunk[last + 1:])
        return lines

    def _add(self, data: bytes) -> None:
        if self.dropping:
            self.tail = (self.tail + data[-ID_EDGE_BYTES:])[-ID_EDGE_BYTES:]
            return
        self.pending += data
        if len(self.pending) > MAX_LINE_BYTES:
            self.head, self.tail = bytes(self.pending[:ID_EDGE_BYTES]), bytes(self.pending[-ID_EDGE_BYTES:])
            self.pending = bytearray()
            self.dropping = True

    def _finish(self) -> bytes:
        if self.dropping:
            self.dropping = False
            return DroppedLine(TOO_LONG, self.head, self.tail)
        return bytes(self.pending)

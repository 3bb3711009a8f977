"""Commands on pseudo-terminals.

Upstream's shape: the child is a session leader (pid == pgid) with the terminal as
its controlling tty, sized 24x80 unless asked, input written in order. Reads wait on the master fd in the event loop
(``anyio.wait_readable``), so a session costs no thread; exit is awaited on a
pidfd. The master stays open until the host has finished with the process group
(closing it would send SIGHUP early).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from functools import cache

import anyio
from ptyprocess import PtyProcess

from codespace.contract import CommandSpec

READ_CHUNK = 65536  # upstream reads 8 KiB; larger reads cut the per-chunk overhead for bulk output
PR_SET_PDEATHSIG = 1


@cache
def _prctl():  # noqa: ANN202
    return ctypes.CDLL(None, use_errno=True).prctl


def _child_setup(parent_pid: int) -> None:
    # SIGTERM when the server dies; re-check because it may already have died.
    _prctl()(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


class PtyProcessHandle:
    """One command on a terminal (the contract's TerminalProcess)."""

    def __init__(self, process: PtyProcess) -> None:
        self._process = process
        self.pid = process.pid
        self.fd = process.fd
        os.set_blocking(self.fd, False)
        self._pidfd = os.pidfd_open(self.pid)
        self._write_lock = anyio.Lock()
        self._closed = False

    async def read(self) -> bytes:
        while True:
            try:
                return os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave descriptor is closed: end of output
                    return b""
                raise

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.fd, view):]
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)

    def resize(self, rows: int, cols: int) -> None:
        self._process.setwinsize(rows, cols)

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    async def wait(self) -> int:
        await anyio.wait_readable(self._pidfd)
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.close(self._pidfd)
        # Close the master ourselves: ptyprocess's close() would signal and waitpid a
        # process we have already reaped.
        self._process.fileobj.close()
        self._process.closed = True


class PtyTerminal:
    """The Terminal backend."""

    async def spawn(self, spec: CommandSpec) -> PtyProcessHandle:
        parent = os.getpid()
        process = PtyProcess.spawn(
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            dimensions=(spec.rows, spec.cols),
            pass_fds=tuple(spec.pass_fds),
            preexec_fn=lambda: _child_setup(parent),
        )
        return PtyProcessHandle(process)

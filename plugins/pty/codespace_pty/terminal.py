"""Commands on pseudo-terminals.

Upstream's shape: the child is a session leader (pid == pgid) with the terminal as
its controlling tty, sized 24x80 unless asked, input written in order. Reads wait on the master fd in the event loop
(``anyio.wait_readable``), so a session costs no thread; exit is awaited on a
pidfd. The master stays open until the host has finished with the process group
(closing it would send SIGHUP early).
"""

from __future__ import annotations

import errno
import os

import anyio
from ptyprocess import PtyProcess

from codespace.contract import CommandSpec
from codespace.contract import arm_parent_death_signal, read_some, reset_signals, signal_group, wait_exit, write_all

READ_CHUNK = 65536  # upstream reads 8 KiB; larger reads cut the per-chunk overhead for bulk output


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
        try:
            return await read_some(self.fd, READ_CHUNK)
        except OSError as exc:
            if exc.errno == errno.EIO:  # every slave descriptor is closed: end of output
                return b""
            raise

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            await write_all(self.fd, data)

    def resize(self, rows: int, cols: int) -> None:
        if self._closed:  # its descriptor's number may be another file's by now
            raise OSError(errno.EBADF, "the terminal is closed")
        self._process.setwinsize(rows, cols)

    def signal_group(self, signum: int) -> None:
        signal_group(self.pid, signum)

    async def wait(self) -> int:
        return await wait_exit(self.pid, self._pidfd)

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
        # The working directory is entered in preexec_fn, whose errors ptyprocess reports from
        # the child; its own chdir raises in the forked copy of the server, which then ran the
        # server's code on (found by testing: a missing cwd answered with a server traceback).
        process = PtyProcess.spawn(
            spec.argv,
            env=spec.env,
            dimensions=(spec.rows, spec.cols),
            pass_fds=tuple(spec.pass_fds),
            preexec_fn=lambda: _in_child(parent, spec.cwd),
        )
        return PtyProcessHandle(process)


def _in_child(parent: int, cwd: str) -> None:
    try:
        os.chdir(cwd)
    except OSError as exc:
        # ptyprocess sends the class and text; OSError's own class keeps the errno out of it
        raise ChildProcessError(f"cannot enter the working directory {cwd}: {exc.strerror}") from None
    reset_signals()  # ^C and job control must not depend on how the server was started
    arm_parent_death_signal(parent)

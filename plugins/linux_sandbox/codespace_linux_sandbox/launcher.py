"""The fast path, server side: start per-command helpers from the warm helper (:mod:`.zygote`).

Runs in the server.

Process tree (bubblewrap engine)::

    server ─┬─ zygote                (own session; hardened; dies with the server)
            ├─ helper  (session leader: the pid the host signals, sweeps, waits for)
            │    └─ bwrap (own session) ── PID 1 ── command
            └─ helper ...

The zygote forks each helper with ``clone(CLONE_PARENT)``, so every helper is a child of
the server: :class:`Launched` waits for it on a pidfd and reaps it with ``waitpid`` like any
child (the exit status comes from the kernel; nothing is relayed), and a helper outlives a
crashed zygote. The request is one blocking round trip on a ``SOCK_SEQPACKET`` socketpair
(send the descriptors, receive the pid: well under a millisecond, the cost of a fork),
serialised by a lock, so it works from any event loop the server runs.

The zygote is started from the thread that will outlive it (the event loop's main thread):
``PR_SET_PDEATHSIG`` fires when the *thread* that started a process exits, and the helpers,
whose parent is the server, inherit that tie. When it cannot start, keeps dying, or the
caller is another thread, each command gets a helper of its own instead (the slow path,
what ``wrap`` does), and ``info()`` says why.
"""

from __future__ import annotations

import array
import logging
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable

from codespace.contract import wait_exit

from .core_hardening import ENV as HARDENING_ENV
from .zygote import READY, REQUEST, REQUEST_USERNS

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
REPLY_TIMEOUT_S = 10.0
MAX_FAILURES = 3  # in a row: then every command starts a helper of its own
SETPRIV = shutil.which("setpriv")


def helper_environment() -> dict[str, str]:
    """What every helper the server starts finds in its environment besides its descriptors: where
    the core's hardening module is (the helpers do not have the core on their path, see
    :mod:`.core_hardening`)."""
    from codespace.contract import hardening

    return {HARDENING_ENV: os.path.abspath(hardening.__file__)}


class ZygoteUnavailable(Exception):
    """The warm helper cannot serve this request; the message says why."""


class Zygote:
    """The warm helper of this server process (every workspace shares it: the handshake
    carries everything per command)."""

    def __init__(self, argv: Callable[[], list[str]]) -> None:
        self._argv = argv
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self._users = 0
        self.failures = 0
        self.problem: str | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._ready else None

    # -- lifecycle ---------------------------------------------------------------------

    def acquire(self) -> bool:
        """A service wants it running (pre-warm): start it now; :meth:`release` when done."""
        with self._lock:
            self._users += 1
            return self._start_locked()

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                self._stop_locked("no longer needed")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        with self._lock:
            return self._ready_locked(timeout)

    def stop(self) -> None:
        with self._lock:
            self._stop_locked("stopped")

    def _start_locked(self) -> bool:
        if self._proc is not None and self._proc.poll() is None:
            return True
        if self._proc is not None:
            self._stop_locked(f"the warm helper exited (status {self._proc.returncode})")
        if self.failures >= MAX_FAILURES:
            return False  # self.problem says why
        if threading.current_thread() is not threading.main_thread():
            self.problem = ("not started from this thread: the parent-death signal is tied to the thread that "
                            "starts it, so it is started from the server's main thread only")
            return False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = {**helper_environment(), "CODESPACE_FD_ZYGOTE": str(theirs.fileno()),
                   "CODESPACE_ZYGOTE_PARENT": str(os.getpid())}
            self._proc = subprocess.Popen(self._argv(), env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except OSError as exc:
            ours.close()
            self._failed(f"cannot start the warm helper: {exc}")
            return False
        finally:
            theirs.close()
        self._sock = ours
        self._ready = False
        return True

    def _ready_locked(self, timeout: float) -> bool:
        if self._ready:
            return True
        if self._sock is None:
            return False
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(64)
        except OSError as exc:
            data = f"({exc})".encode()
        if data != READY:
            code = self._proc.poll() if self._proc is not None else None
            self._stop_locked(f"the warm helper did not start (said {data[:80]!r}, exit status {code})")
            return False
        self._ready = True
        self.problem = None
        self.failures = 0
        log.info("sandbox warm helper ready (pid %d)", self._proc.pid if self._proc else -1)
        return True

    def _stop_locked(self, reason: str) -> None:
        failed = reason not in ("stopped", "no longer needed")
        if self._sock is not None:
            self._sock.close()  # the zygote exits on EOF
            self._sock = None
        proc, self._proc = self._proc, None
        self._ready = False
        if proc is not None:
            if failed:
                proc.kill()  # it may hang; its per-command helpers are not its children
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if failed:
            self._failed(reason)

    def _failed(self, reason: str) -> None:
        self.failures += 1
        self.problem = reason if self.failures < MAX_FAILURES else f"{reason} ({self.failures} failures in a row)"
        log.warning("sandbox warm helper: %s", self.problem)

    # -- requests ----------------------------------------------------------------------

    def request(self, fds: list[int], userns: int | None = None) -> int:
        """One per-command helper for ``fds`` (stdin, stdout, stderr, handshake[, seccomp]) and
        ``userns`` (the id mapping of ``options.run_as``, see :mod:`.identity`); returns its pid, a
        child of this process. Raises ZygoteUnavailable."""
        with self._lock:
            if not self._start_locked() or not self._ready_locked(READY_TIMEOUT_S):
                raise ZygoteUnavailable(self.problem or "the warm helper is not running")
            sock = self._sock
            try:
                sock.settimeout(REPLY_TIMEOUT_S)
                sent = fds if userns is None else [*fds, userns]
                sock.sendmsg([REQUEST if userns is None else REQUEST_USERNS],
                             [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", sent))])
                reply = sock.recv(4096)
            except OSError as exc:
                self._stop_locked(f"the warm helper stopped answering ({exc})")
                raise ZygoteUnavailable(self.problem) from None
        if reply.startswith(b"P") and reply[1:].isdigit():
            return int(reply[1:])
        if reply.startswith(b"E"):
            raise ZygoteUnavailable(f"the warm helper refused the request: {reply[1:].decode(errors='replace')}")
        with self._lock:
            self._stop_locked(f"the warm helper exited (reply {reply[:40]!r})")
        raise ZygoteUnavailable(self.problem)


class Launched:
    """A per-command helper, child of this process (:class:`codespace.contract.LaunchedProcess`)."""

    def __init__(self, pid: int, on_release: Callable[[], None] | None = None,
                 popen: subprocess.Popen | None = None) -> None:
        self.pid = pid
        self.forked = popen is None  # by the warm helper (else started alone: the slow path)
        self._pidfd: int | None = os.pidfd_open(pid)
        self._on_release = on_release
        self._popen = popen

    async def wait(self) -> int:
        if self._pidfd is None:
            raise RuntimeError(f"process {self.pid} was released before it was waited for")
        code = await wait_exit(self.pid, self._pidfd)
        if self._popen is not None:
            self._popen.returncode = code  # reaped here; Popen must not wait for it again
        return code

    def release(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self._on_release is not None:
            on_release, self._on_release = self._on_release, None
            on_release()


def spawn_helper(argv: list[str], fds: list[int], cwd: str) -> subprocess.Popen:
    """The slow path: a helper started for this command alone (as ``wrap`` makes the host do),
    in its own session, with SIGTERM when the server dies."""
    names = ["CODESPACE_FD_HANDSHAKE", "CODESPACE_FD_SECCOMP"]
    env = {**helper_environment(), **{name: str(fd) for name, fd in zip(names, fds[3:], strict=False)}}
    prefix = [SETPRIV, "--pdeathsig", "TERM", "--"] if SETPRIV else []
    return subprocess.Popen([*prefix, *argv], cwd=cwd, env=env, stdin=fds[0], stdout=fds[1], stderr=fds[2],
                            pass_fds=fds[3:], start_new_session=True, close_fds=True)

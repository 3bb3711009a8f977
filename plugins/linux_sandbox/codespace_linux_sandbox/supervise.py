"""Supervision: the helper stays the command's parent (or bwrap's) until it ends.

bubblewrap engine — process tree::

    helper (session leader, started by the host) ── bwrap (own session) ── bwrap init, PID 1
                                                                             └─ command, PID 2

bwrap is started in a session of its own so that signals the host sends to the helper's
group and session (timeouts, ``terminate``, Ctrl-C on a terminal) do not kill it (its
default action would SIGKILL the sandbox); the helper forwards HUP/INT/QUIT/TERM to the
sandbox's process group instead (bwrap's ``--new-session`` puts PID 1 and the command in
one group, whose id is the ``child-pid`` bwrap writes to ``--info-fd``). bwrap's PID 1
reaps every orphan and exits with the command's code, or 128+N when it died of signal N;
``--die-with-parent`` kills the sandbox if the helper dies. When the helper forwarded
signal N and the command ends with 128+N, the helper re-raises N, so the host sees the
command killed by N as it would without a sandbox.

Landlock engine — see :func:`run_landlock`.
"""


import _signal
import posix
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs time on every command
if TYPE_CHECKING:
    from collections.abc import Callable

FORWARDED = (_signal.SIGHUP, _signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM)
# The host's kill_session signals the group and then every session member, so the helper
# gets the same signal twice within microseconds; the kernel would merge such a pair for one
# process while it is pending, and the helper does the same before forwarding.
DUPLICATE_WINDOW_S = 0.05


class _Forwarder:
    """Signal handlers that pass HUP/INT/QUIT/TERM on to the sandbox's process group."""

    def __init__(self, info_fd: int) -> None:
        self.info_fd = info_fd
        self.group: int | None = None
        self.received: list[int] = []
        self.fallback_pid: int | None = None
        self._last: dict[int, float] = {}

    def _find_group(self) -> int | None:
        if self.group is None and self.info_fd >= 0:
            data = b""
            while b"}" not in data:  # bwrap writes the object once, early; EOF if it failed
                chunk = posix.read(self.info_fd, 4096)
                if not chunk:
                    break
                data += chunk
            posix.close(self.info_fd)
            self.info_fd = -1
            start = data.find(b'"child-pid":')
            if start >= 0:
                digits = data[start + 12:].lstrip(b" ").split(b",")[0].split(b"\n")[0].strip()
                if digits.isdigit():
                    self.group = int(digits)
        return self.group

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        now = time.monotonic()
        if now - self._last.get(signum, -1.0) < DUPLICATE_WINDOW_S:
            return
        self._last[signum] = now
        group = self._find_group()
        try:
            if group is not None:
                posix.killpg(group, signum)
            elif self.fallback_pid is not None:
                posix.kill(self.fallback_pid, signum)  # no sandbox yet: stop bwrap itself
        except OSError:
            pass


def _exit_code(status: int) -> int:
    return posix.waitstatus_to_exitcode(status)


def reraise_or_code(code: int, received: list[int]) -> int:
    """The helper's own exit: the command's code, or its terminating signal re-raised."""
    signum = -code if code < 0 else (code - 128 if code > 128 and code - 128 in received else 0)
    if signum:
        _signal.signal(signum, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {signum})
        posix.kill(posix.getpid(), signum)
    return code if code >= 0 else 128 - code


def run_bwrap(bwrap: str, args_for: "Callable[[int], list[str]]", command: list[str], pass_fds: list[int],
              after_spawn: "Callable[[int], None]") -> tuple[int, list[int]]:
    """Run bwrap with ``args_for(info_fd)`` (handed over through a memfd, so the command's environment
    never shows in /proc/<pid>/cmdline) and call ``after_spawn(pid)`` while bwrap sets the
    sandbox up on another core; returns (exit code, signals forwarded)."""
    info_read, info_write = posix.pipe()
    args_fd = posix.memfd_create("codespace-bwrap-args", 0)
    try:
        data = "\0".join(args_for(info_write)).encode("utf-8", "surrogateescape") + b"\0"
        view = memoryview(data)
        while view:
            view = view[posix.write(args_fd, view):]
        posix.lseek(args_fd, 0, 0)
        for fd in (info_write, args_fd, *pass_fds):
            posix.set_inheritable(fd, True)
        forward = _Forwarder(info_read)
        previous = {signum: _signal.signal(signum, forward) for signum in FORWARDED}
        pid = posix.posix_spawn(bwrap, [bwrap, "--args", str(args_fd), "--", *command], {}, setsid=True)
        forward.fallback_pid = pid
    finally:
        for fd in (info_write, args_fd, *pass_fds):
            posix.close(fd)
    after_spawn(pid)
    _, status = posix.waitpid(pid, 0)  # signal handlers run meanwhile (PEP 475 retries)
    for signum, handler in previous.items():
        _signal.signal(signum, handler)
    if forward.info_fd >= 0:
        posix.close(forward.info_fd)
    return _exit_code(status), forward.received

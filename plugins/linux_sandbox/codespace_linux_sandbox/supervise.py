"""Supervision: the helper stays the command's parent (or bwrap's) until it ends.

Runs in the per-command helper.

bubblewrap engine — process tree::

    helper (session leader) ── bwrap (own session; PID 1 of the helper's PID namespace)
                                  └─ bwrap init, PID 1 of bwrap's PID namespace
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

``--die-with-parent`` alone leaves a gap: bwrap's init asks for its parent-death signal only
once the sandbox is built, milliseconds after it starts, so a helper killed with SIGKILL in
that time (a 5 ms timeout does it) killed the outer bwrap and left the init running the
command. So the helper first makes a PID namespace of its own (``unshare(CLONE_NEWPID)``) and
bwrap becomes its PID 1: when that dies, the kernel kills every process in the namespace and
in the namespaces nested in it. The outer bwrap asks for SIGKILL on the helper's death right
after cloning, before it writes ``--info-fd`` and before it lets the sandbox's init go on
(bubblewrap 0.8.0, seen with strace); a helper that died before that leaves no reader on the
info pipe, so the write raises SIGPIPE and ends bwrap all the same. bwrap reports the init's
pid in its own namespace; the helper translates it.

Being PID 1 of a namespace also keeps a terminal's signals off bwrap: a tty session's command
keeps the helper's session and process group (its controlling terminal), so Ctrl-C signals
the outer bwrap too, and a namespace's init ignores a signal it has no handler for. A bwrap
that is not PID 1 dies of SIGINT, and its init and the command with it (seen as an
unprivileged server: a ``trap ... INT`` lost about one time in three).

Without CAP_SYS_ADMIN the helper first enters a user namespace of its own that maps only its
uid and gid (:func:`own_user_namespace`; what bwrap itself does to build the sandbox), where it
has the capability. A helper that may not make one either (user namespaces refused to it)
starts bwrap as before, and the gap is listed among what the sandbox cannot enforce.

When the server dies, the helper gets its parent-death signal (SIGTERM), forwards it, and
gives the command :data:`PARENT_DEATH_GRACE_S` to end before it kills the sandbox: nothing
outlives a dead server.

Landlock engine — see :mod:`.landlock_engine`.
"""


import _signal
import posix
import time

from . import libc
from .capabilities import has_cap_sys_admin

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs time on every command
if TYPE_CHECKING:
    from collections.abc import Callable

    from .identity import BwrapIdentity

FORWARDED = (_signal.SIGHUP, _signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM)
# The host's kill_session signals the group and then every session member, so the helper
# gets the same signal twice within microseconds; the kernel would merge such a pair for one
# process while it is pending, and the helper does the same before forwarding.
DUPLICATE_WINDOW_S = 0.05
PARENT_DEATH_GRACE_S = 2.0
# The interpreter ignores these at start-up; an ignored disposition survives exec, so bwrap and
# the command would inherit it (``yes | head -1`` would print "Broken pipe" instead of ending).
PYTHON_IGNORED = (_signal.SIGPIPE, _signal.SIGXFSZ)


class SandboxSetupError(Exception):
    """The sandbox started but could not be finished (it was killed; the command never ran)."""


def arm_parent_death_deadline(kill: "Callable[[], None]") -> None:
    """After the server died: ``kill`` (SIGKILL to what is left) once the grace period is over."""
    def expire(signum: int, frame: object) -> None:
        kill()

    _signal.signal(_signal.SIGALRM, expire)
    _signal.setitimer(_signal.ITIMER_REAL, PARENT_DEATH_GRACE_S)


class _Forwarder:
    """Signal handlers that pass HUP/INT/QUIT/TERM on to the sandbox's process group."""

    def __init__(self, info_fd: int) -> None:
        self.info_fd = info_fd
        self.group: int | None = None
        self.received: list[int] = []
        self.fallback_pid: int | None = None
        self.leads_namespace = False  # bwrap (fallback_pid) is PID 1 of the helper's PID namespace
        self.killed_for: int | None = None
        self.reported = False  # bwrap wrote the sandbox's PID 1 to --info-fd
        self.parent = posix.getppid()
        self._last: dict[int, float] = {}
        self._deadline_armed = False

    def find_group(self) -> int | None:
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
                    self.reported = True
                    self.group = int(digits)
                    if self.leads_namespace and self.fallback_pid is not None:
                        self.group = host_pid(self.fallback_pid, self.group)  # None: already gone
        return self.group

    def kill_all(self) -> None:
        for target in (self.group, self.fallback_pid):
            if target is not None:
                try:
                    posix.kill(target, 9)  # PID 1 of the namespace: the kernel ends every process in it
                except OSError:
                    pass

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        # Checked before the duplicate window: a server dying with several threads reparents us
        # to a sibling thread first (same pid, a first SIGTERM) and then to init (a second one,
        # microseconds later, which is the one that shows the death).
        if not self._deadline_armed and posix.getppid() != self.parent:
            self._deadline_armed = True
            arm_parent_death_deadline(self.kill_all)
        now = time.monotonic()
        if now - self._last.get(signum, -1.0) < DUPLICATE_WINDOW_S:
            return
        self._last[signum] = now
        group = self.find_group()
        try:
            if group is not None:
                posix.killpg(group, signum)
            elif self.reported or self.fallback_pid is None:
                pass  # bwrap could not be started, or the sandbox has ended (and bwrap is about to)
            elif self.leads_namespace:
                # No sandbox yet: stop bwrap itself. As PID 1 of a namespace it ignores every
                # signal it has no handler for but SIGKILL, which the helper reports as signum.
                self.killed_for = signum
                posix.kill(self.fallback_pid, _signal.SIGKILL)
            else:
                posix.kill(self.fallback_pid, signum)  # no sandbox yet: stop bwrap itself
        except OSError:
            pass


def _exit_code(status: int) -> int:
    return posix.waitstatus_to_exitcode(status)


def reraise_or_code(code: int, received: list[int]) -> int:
    """The helper's own exit: the command's code, or its terminating signal re-raised."""
    signum = -code if code < 0 else (code - 128 if code > 128 and code - 128 in received else 0)
    if signum:
        # SIGKILL has no disposition to reset (sigaction refuses it: EINVAL) and cannot be blocked.
        # The command dies of it when the host kills the sandbox's processes before the helper (a
        # keeper's kill_tree: descendants first), or when the parent-death deadline expires.
        if signum != _signal.SIGKILL:
            _signal.signal(signum, _signal.SIG_DFL)
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {signum})
        posix.kill(posix.getpid(), signum)
    return code if code >= 0 else 128 - code


def own_user_namespace() -> bool:
    """Without CAP_SYS_ADMIN, enter a user namespace of our own, mapping only this process's uid
    and gid to themselves (nothing it creates or reads changes owner), in which it holds the
    capability that :func:`run_bwrap`'s ``unshare(CLONE_NEWPID)`` needs; whether it entered one.

    Call it before any thread starts (the kernel refuses a user namespace to a process with
    threads), as the PID namespace must come after them (a process whose children go to another
    PID namespace may start no thread). Raises OSError when the namespace was made but its ids
    could not be mapped: this process cannot go on with unmapped ids. Root makes none: a root
    server's helpers give commands another uid, which such a namespace would not map."""
    if posix.geteuid() == 0 or has_cap_sys_admin():
        return False
    uid, gid = posix.getuid(), posix.getgid()
    if libc.unshare(libc.CLONE_NEWUSER) != 0:
        return False
    # A hardened (non-dumpable) process's /proc files are root's, its maps included, so it could
    # not write them: dumpable for these three writes. Only the server's own uid could use the
    # moment, and it can trace the server itself; sandboxed commands cannot reach this process.
    hardened = libc.prctl(libc.PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    if hardened:
        libc.prctl(libc.PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            fd = posix.open(f"/proc/self/{name}", posix.O_WRONLY)
            try:
                posix.write(fd, text.encode())
            finally:
                posix.close(fd)
    finally:
        if hardened and libc.prctl(libc.PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(libc.errno(), "prctl(PR_SET_DUMPABLE, 0) failed after mapping the ids")
    return True


def run_bwrap(bwrap: str, args_for: "Callable[[int, int], list[str]]", command: list[str], pass_fds: list[int],
              after_spawn: "Callable[[int], None]",
              sandbox_ready: "Callable[[int], None] | None" = None, own_session: bool = True,
              identity: "BwrapIdentity | None" = None, max_processes: int | None = None) -> tuple[int, list[int]]:
    """Run bwrap with ``args_for(info_fd, block_fd)`` (handed over through a memfd, so the command's
    environment never shows in /proc/<pid>/cmdline) and call ``after_spawn(pid)`` while bwrap sets
    the sandbox up on another core; returns (exit code, signals forwarded).

    With ``sandbox_ready``, bwrap waits on ``--block-fd`` once the sandbox is built and before the
    command runs, and ``sandbox_ready(pid of the sandbox's PID 1)`` finishes it from outside first
    (the proxy listener in its network namespace); if that fails, the sandbox is killed and
    :class:`SandboxSetupError` raised.

    ``max_processes``: the sandbox's PID 1 gets it as RLIMIT_NPROC at that point too, before it
    starts the command, so the command and all it starts inherit it. The kernel counts a uid's
    processes per user namespace and checks each level's own limit, and the sandbox's user
    namespace is the command's alone: only its processes count, not the host's processes of the
    same uid or other commands'. Set in the helper before bwrap instead, the limit would also be
    the cap of the level above (the new namespace takes its creator's), where a root server's
    ``run_as`` uid counts every process it has on the host."""
    info_read, info_write = posix.pipe()
    block_read, block_write = posix.pipe() if sandbox_ready is not None or max_processes else (-1, -1)
    args_fd = posix.memfd_create("codespace-bwrap-args", 0)
    inherited = [info_write, args_fd, *pass_fds, *([block_read] if block_read >= 0 else [])]
    # Held back until bwrap's pid is noted: a handler run before that (the helper losing its core
    # right after the spawn) read bwrap's report of the sandbox's PID 1 with nothing to translate
    # it from, signalled that number as a host process group and kept it (a Ctrl-C lost, seen in
    # CI). Held back, a signal that came before the spawn stops bwrap instead of being dropped.
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, FORWARDED)
    try:
        data = "\0".join(args_for(info_write, block_read)).encode("utf-8", "surrogateescape") + b"\0"
        view = memoryview(data)
        while view:
            view = view[posix.write(args_fd, view):]
        posix.lseek(args_fd, 0, 0)
        for fd in inherited:
            posix.set_inheritable(fd, True)
        forward = _Forwarder(info_read)
        previous = {signum: _signal.signal(signum, forward) for signum in FORWARDED}
        # bwrap becomes PID 1 of a namespace of ours (module docstring): it asks for SIGKILL on our
        # death right after cloning the sandbox, and only then writes --info-fd; had we died before
        # it asked, that write fails (we hold the only read end) and SIGPIPE ends it. Either way
        # the kernel then ends every process in the namespace. CAP_SYS_ADMIN (here, or in the user
        # namespace of own_user_namespace) is what it takes; without: as before.
        forward.leads_namespace = libc.unshare(libc.CLONE_NEWPID) == 0
        # identity (server as root): bwrap starts as the unprivileged run_as, in its idmapped view
        # (see .identity); the helper itself is root again and back in the host's view right after.
        if identity is not None:
            identity.enter()
        try:
            pid = posix.posix_spawn(bwrap, [bwrap, "--args", str(args_fd), "--", *command], {}, setsid=own_session,
                                    setsigdef=PYTHON_IGNORED, setsigmask=mask, resetids=identity is not None)
        finally:
            if identity is not None:
                identity.leave()
        forward.fallback_pid = pid
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    except BaseException:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
        if block_write >= 0:
            posix.close(block_write)
        raise
    finally:
        for fd in inherited:
            posix.close(fd)
    after_spawn(pid)
    failure = None
    if block_write >= 0:
        failure = _finish_and_release(forward, block_write, sandbox_ready, identity, max_processes)
    _, status = posix.waitpid(pid, 0)  # signal handlers run meanwhile (PEP 475 retries)
    for signum, handler in previous.items():
        _signal.signal(signum, handler)
    if forward.info_fd >= 0:
        posix.close(forward.info_fd)
    if failure is not None:
        raise SandboxSetupError(failure)
    code = _exit_code(status)
    if code == -_signal.SIGKILL and forward.killed_for is not None:
        code = -forward.killed_for
    return code, forward.received


def _finish_and_release(forward: "_Forwarder", block_write: int, sandbox_ready: "Callable[[int], None] | None",
                        identity: "BwrapIdentity | None", max_processes: int | None) -> str | None:
    """Finish the sandbox bwrap built from outside (the process limit, ``sandbox_ready``), then let
    it start the command by writing ``--block-fd``; on a failure the sandbox is killed instead,
    and the failure returned."""
    failure = None
    # Signals wait while the info is read here, or a handler would read it concurrently.
    _signal.pthread_sigmask(_signal.SIG_BLOCK, FORWARDED)
    try:
        group = forward.find_group()
        if group is None:
            failure = "bubblewrap did not report the sandbox's process"
        else:
            if max_processes:
                _limit_processes(group, max_processes, identity)
            if sandbox_ready is not None:
                sandbox_ready(group)
            posix.write(block_write, b"x")
    except Exception as exc:  # noqa: BLE001 - reported as the helper's own failure
        failure = str(exc)
    finally:
        posix.close(block_write)
        if failure is not None:
            forward.kill_all()
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, FORWARDED)
    return failure


def _limit_processes(pid: int, count: int, identity: "BwrapIdentity | None") -> None:
    """RLIMIT_NPROC of the sandbox's PID 1 (see :func:`run_bwrap`). A root helper may lack
    CAP_SYS_RESOURCE (a container's root); the command's ids, as real ids, let it all the same."""
    def limit() -> None:
        libc.limit_processes(pid, count)

    try:
        limit() if identity is None else identity.with_real_ids(limit)
    except OSError as exc:
        raise SandboxSetupError(f"cannot limit the command's processes: {exc.strerror}") from None


def host_pid(parent: int, inner: int) -> int | None:
    """Our number for the child of ``parent`` that ``parent``'s PID namespace numbers ``inner``
    (bwrap reports the sandbox's PID 1 in its own namespace); None when it is gone."""
    def matches(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                status = f.read()
        except OSError:
            return False
        ppid = status.partition(b"\nPPid:\t")[2].partition(b"\n")[0]
        nspid = status.partition(b"\nNSpid:\t")[2].partition(b"\n")[0].split()
        return ppid == str(parent).encode() and len(nspid) > 1 and nspid[1] == str(inner).encode()

    near = range(parent + 1, parent + 33)  # pids are handed out in order: bwrap's first child is close
    found = next((pid for pid in near if matches(pid)), None)
    if found is None:
        found = next((int(name) for name in posix.listdir("/proc")
                      if name.isdigit() and int(name) not in near and matches(int(name))), None)
    return found

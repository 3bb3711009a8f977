"""Track every process a command starts by something it cannot leave: a cgroup v2.

A process leaves its session with ``setsid()`` and its process group with
``setpgid()``; it cannot leave its cgroup unless it may write a ``cgroup.procs``
outside it. So where the server can create cgroups (root, or a delegated
subtree the server runs in, as systemd's ``Delegate=yes`` gives), each command
runs in a cgroup of its own, joined before the command's first instruction (a
``/bin/sh`` stub writes itself into ``cgroup.procs`` and execs the command), and
is killed as a whole with ``cgroup.kill``.

Layout: ``<base>/cs-<state hash>-<server id>/c<n>``, where
``<base>`` is the server's own cgroup v2 directory, or ``CODESPACE_CGROUP`` (``off``:
use the keeper below even where a cgroup could be made).
A server's directory whose server is gone (kill -9: its lock in the state
directory is free) is killed and removed by the next server of the same state
directory, so a daemon that survived the crash dies at the restart whatever it
did to its session, group or signals.

An unsandboxed command's cgroup may also have a mirror that limits its processes
(``pids_limit``); ``limit_detail`` says whether, and how or why not.

Where no cgroup can be made, each command runs under a keeper (``keeper.py``): a
child subreaper that holds every process the command starts, kills what is left
when the command ends, and kills everything when the server dies. It costs a
Python start (~25 ms) per command. ``mechanism`` says which is in use
(``cgroup`` or ``subreaper``); doctor and workspace_info report it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from .cgroupfs import KILL_WAIT_S, kill_procs, procs, remove_tree, write
from .pids_limit import NONE, PidsLimit

log = logging.getLogger(__name__)

ENV_CGROUP = "CODESPACE_CGROUP"

# The stub a command starts as: join the cgroup named by $0, then become the command.
# POSIX sh reads no start-up file when non-interactive (bash as sh ignores BASH_ENV).
_JOIN = 'echo 0 > "$0/cgroup.procs" || { echo "codespace: cannot join cgroup $0" >&2; exit 125; }; exec "$@"'
# The same, also joining the cgroup v1 pids mirror named by $1 (its pids.max set) first.
_JOIN_LIMITED = ('echo 0 > "$1/cgroup.procs" || { echo "codespace: cannot join cgroup $1" >&2; exit 125; }; '
                 'echo 0 > "$0/cgroup.procs" || { echo "codespace: cannot join cgroup $0" >&2; exit 125; }; '
                 'shift; exec "$@"')
SH = "/bin/sh"
KEEPER = str(Path(__file__).with_name("keeper.py"))


def _cgroup2_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        return None
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


def _base_dir(env: dict[str, str] | os._Environ[str]) -> tuple[Path | None, str]:
    """The directory server cgroups are made in, or None and why not."""
    configured = env.get(ENV_CGROUP)
    if configured == "off":
        return None, f"{ENV_CGROUP}=off"
    if configured:
        return Path(configured), f"{ENV_CGROUP}={configured}"
    mount = _cgroup2_mount()
    if mount is None:
        return None, "no cgroup v2 file system is mounted"
    own = _own_cgroup()
    if own is None:
        return None, "this process has no cgroup v2 membership (/proc/self/cgroup)"
    return Path(mount + own.rstrip("/")) if own != "/" else Path(mount), f"own cgroup {own} at {mount}"


def _populated(group: Path) -> bool:
    try:
        for line in (group / "cgroup.events").read_text().splitlines():
            if line.startswith("populated "):
                return line.split()[1] == "1"
    except OSError:
        return False
    return False


def kill_tree(group: Path) -> None:
    """SIGKILL everything in ``group`` (and below), wait until it is empty, remove it."""
    if not group.exists():
        return
    try:
        write(group / "cgroup.kill", "1")
    except OSError:
        kill_procs(group)  # kernels before 5.14 have no cgroup.kill
    deadline = time.monotonic() + KILL_WAIT_S
    while _populated(group) and time.monotonic() < deadline:
        time.sleep(0.005)
    remove_tree(group)


_FALLBACK = "a keeper per command (child subreaper) holds its processes, since no cgroup can be made"
LOCKS = "cgroup-locks"  # in the state directory: one flock per live server, held for its life


class Tracker:
    """Per-command cgroups of one server, or the fallback when none can be made.

    Whether a server is alive is asked of its lock (``<state dir>/cgroup-locks/<id>``, locked
    for the server's life), not of its pid: a server in another PID namespace has a pid this
    one cannot see, and its cgroups must not be taken for a dead server's."""

    def __init__(self, state_dir: Path, env: dict[str, str] | os._Environ[str] | None = None) -> None:
        self._prefix = "cs-" + hashlib.sha256(os.fsencode(str(state_dir))).hexdigest()[:12] + "-"
        self._locks = Path(state_dir) / LOCKS
        self._env = os.environ if env is None else env
        self.server_dir: Path | None = None
        self.limits = PidsLimit()  # unsandboxed commands' process limits
        self.mechanism = "subreaper"
        self.detail = "not started"
        self._counter = 0
        self._lock_fd: int | None = None

    def start(self) -> None:
        """Make this server's cgroup directory (if possible) and kill what dead servers of the
        same state directory left in theirs."""
        self._make_server_dir(reap=True)

    def probe(self) -> tuple[str, str]:
        """(mechanism, detail) this server would use, leaving nothing behind (for doctor)."""
        self._make_server_dir(reap=False)
        found = (self.mechanism, self.detail)
        self.stop()
        return found

    def _make_server_dir(self, *, reap: bool) -> None:
        base, where = _base_dir(self._env)
        if base is None:
            self.detail = f"{_FALLBACK}: {where}"
            self.limits.detail = f"{NONE}no cgroup can be made ({where})"
            return
        if reap:
            self.reap_stale(base)
        ident = secrets.token_hex(6)
        me = base / f"{self._prefix}{ident}"
        try:
            self._locks.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self._locks / ident, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._lock_fd = fd
            me.mkdir(mode=0o755)
            (me / "c0").mkdir()
            (me / "c0").rmdir()
        except OSError as exc:
            self._unlock(ident)
            self.detail = f"{_FALLBACK}: cannot create a cgroup in {base} ({exc.strerror})"
            self.limits.detail = f"{NONE}no cgroup can be made in {base}"
            return
        if not os.access(me / "cgroup.procs", os.W_OK):
            remove_tree(me)
            self._unlock(ident)
            self.detail = f"{_FALLBACK}: {me}/cgroup.procs is not writable"
            self.limits.detail = f"{NONE}no cgroup can be made in {base}"
            return
        self.server_dir = me
        self.mechanism = "cgroup"
        self.detail = f"a cgroup v2 per command, in {base} ({where}), killed with cgroup.kill"
        self.limits.start(me.name, self._stale if reap else None)

    @property
    def limit_detail(self) -> str:
        """Whether unsandboxed commands' processes are limited, and how or why not."""
        return self.limits.detail

    def report(self) -> dict[str, str]:
        """What ``workspace_info.sandbox.process_tracking`` shows of this tracker."""
        return {"mechanism": self.mechanism, "detail": self.detail, "unsandboxed_process_limit": self.limit_detail}

    def _unlock(self, ident: str) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        try:
            os.unlink(self._locks / ident)
        except OSError:
            pass

    def _owner_alive(self, ident: str) -> bool:
        try:
            fd = os.open(self._locks / ident, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: leave it alone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _stale(self, base: Path) -> list[Path]:
        """The cgroups in ``base`` of this state directory's servers that are gone."""
        try:
            names = [n for n in os.listdir(base) if n.startswith(self._prefix)]
        except OSError:
            return []
        return [base / name for name in names if not self._owner_alive(name[len(self._prefix):])]

    def reap_stale(self, base: Path) -> list[Path]:
        """Kill and remove the cgroups of this state directory's servers that are gone."""
        killed = []
        for group in self._stale(base):
            ident = group.name[len(self._prefix):]
            if procs(group):
                log.warning("killing the processes a stopped server left in %s", group)
            kill_tree(group)
            try:
                os.unlink(self._locks / ident)
            except OSError:
                pass
            killed.append(group)
        return killed

    def new_group(self, max_processes: int = 0) -> Path | None:
        """A fresh cgroup for one command, or None when cgroups are not in use. With
        ``max_processes`` (an unsandboxed command's limit) and a pids hierarchy, its mirror
        there holds that many processes and threads at most (:meth:`limit_dir`); when that
        cannot be set the command must not run: ToolError."""
        if self.server_dir is None:
            return None
        self._counter += 1
        group = self.server_dir / f"c{self._counter}"
        try:
            group.mkdir()
        except FileNotFoundError:
            try:  # removed under us (an operator's clean-up): make it again
                self.server_dir.mkdir(mode=0o755, exist_ok=True)
                group.mkdir()
            except OSError as exc:
                log.warning("cannot create %s (%s); the command runs under a keeper", group, exc.strerror)
                return None
        except OSError as exc:
            log.warning("cannot create %s (%s); the command runs under a keeper", group, exc.strerror)
            return None
        if max_processes and self.limits.directory is not None:
            try:
                self.limits.limit(group.name, max_processes)
            except OSError as exc:
                self.release(group)
                from ..contract import ToolError

                raise ToolError(
                    f"cannot set the command's process limit ([sandbox] max_processes = {max_processes}) in "
                    f"{self.limits.directory}: {exc.strerror or exc}; the command did not run. To proceed: retry, or ask the "
                    "operator to check that cgroup (or to set max_processes = 0, no limit)",
                    code="spawn_failed",
                ) from exc
        return group

    def limit_dir(self, group: Path | None) -> Path | None:
        """The pids mirror of ``group`` when its command's processes are limited, else None."""
        return None if group is None else self.limits.mirror(group.name)

    def release(self, group: Path) -> bool:
        """Remove a finished command's cgroup and its pids mirror; False if either is still in use."""
        removed = remove_tree(group)
        mirror = self.limit_dir(group)
        if mirror is not None:
            removed = remove_tree(mirror) and removed
        return removed

    def stop(self) -> None:
        if self.server_dir is not None:
            kill_tree(self.server_dir)
            self._unlock(self.server_dir.name[len(self._prefix):])
            self.server_dir = None
        self.limits.stop()


def wrap_argv(group: Path | None, argv: list[str], limit: Path | None = None) -> list[str]:
    """``argv`` preceded by the stub that joins ``group`` (and ``limit``, its pids mirror), or
    by the keeper without one."""
    if group is None:
        return [sys.executable, "-I", "-S", KEEPER, *argv]
    if limit is not None:
        return [SH, "-c", _JOIN_LIMITED, str(group), str(limit), *argv]
    return [SH, "-c", _JOIN, str(group), *argv]


def signal_group(group: Path | None, signum: int) -> int:
    """Send ``signum`` to every process in ``group``; SIGKILL uses cgroup.kill."""
    if group is None or not group.exists():
        return 0
    if signum == signal.SIGKILL:
        try:
            write(group / "cgroup.kill", "1")
            return 1
        except OSError:
            pass
    sent = 0
    for pid in procs(group):
        try:
            os.kill(pid, signum)
            sent += 1
        except OSError:
            pass
    return sent


def populated(group: Path | None) -> bool:
    return group is not None and _populated(group)

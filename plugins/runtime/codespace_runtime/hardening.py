"""The worker's start-up hardening: the contract's :func:`harden_process` (the one module every
helper process shares) plus what a long-lived process holding a socket needs on top.

Order matters and is :func:`harden_worker`'s: first non-dumpable and no core (before the token is
read into memory), then nothing inherited but the channel, then a known umask and cwd, then (child
mode) death with the parent, re-checked because the parent may already be gone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from codespace.contract import HardeningError, arm_parent_death_signal, harden_process

LD_PREFIX = "LD_"
EXIT_REEXEC = 2
"""Exit status when the worker cannot start again without ``LD_*`` (a refused start-up)."""
UMASK_ENV = "CODESPACE_WORKER_UMASK"
"""The umask in octal under which the worker creates files for the agent: the server's (child
mode), else the one the worker was started with (a daemon: its starter's, ``start --umask``, or
its unit's ``UMask=``), since its hardening sets 077 before the runner takes this back."""


def current_umask() -> str:
    """This process's umask in octal, read without setting it (os.umask would change it for
    every thread)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return line.split()[1]
    return "022"


def reexec_without_ld(keep_fds: Sequence[int] = ()) -> None:
    """Start this interpreter again without ``LD_*`` if any is set, keeping ``keep_fds``.

    Removing the variables from a running process is not enough: ``/proc/<pid>/environ`` shows
    the block the process started with, and the dynamic linker already acted on it. Only a fresh
    image started without them is clean; it costs one interpreter start, and only when they are
    present."""
    if not any(key.startswith(LD_PREFIX) for key in os.environ):
        return
    env = {key: value for key, value in os.environ.items() if not key.startswith(LD_PREFIX)}
    for fd in keep_fds:
        os.set_inheritable(fd, True)
    argv = [sys.executable, *sys.orig_argv[1:]]
    # The running image through /proc/self/exe: its path may pass a directory this uid cannot
    # search (an interpreter under a home only root enters, reached by a setpriv'd start), and
    # the magic link does not walk it. argv[0] stays sys.executable, so a venv is found again.
    try:
        os.execve("/proc/self/exe", argv, env)
    except OSError as exc:
        os.write(2, f"codespace-worker: cannot start again without LD_* ({exc}); refusing to run with them\n".encode())
        os._exit(EXIT_REEXEC)


def harden_worker(keep_fds: Sequence[int], *, parent_pid: int | None = None) -> None:
    """Harden this process or exit with upstream's code for the step that failed (5: not made
    non-dumpable, 7: core limit not set). ``keep_fds`` survive; every other descriptor above
    stderr is closed, stdin and stdout become ``/dev/null``. With ``parent_pid`` (child mode) the
    process gets SIGTERM when that parent dies, and stops now if it is already gone."""
    try:
        harden_process()
    except HardeningError as exc:
        os.write(2, f"codespace-worker: hardening failed: {exc}\n".encode())
        os._exit(exc.exit_code)
    close_inherited(keep_fds)
    _null_stdio()
    os.umask(0o077)
    os.chdir("/")
    if parent_pid is not None:
        arm_parent_death_signal(parent_pid)


def close_inherited(keep_fds: Sequence[int]) -> None:
    """Close every descriptor but 0-2 and ``keep_fds`` (whatever a careless parent left open)."""
    keep = {0, 1, 2, *keep_fds}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the directory's own descriptor, already gone


def _null_stdio() -> None:
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)

"""The keeper: what tracks a command's processes where no cgroup can be made.

Run as ``python -I -S keeper.py PROGRAM ARGS...`` (a standalone script: it imports
nothing of CodeSpace, so it starts in ~25 ms). It makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``), forks the command and stays its parent. A process
that leaves the command's session with ``setsid()`` and double-forks is still
reparented to the keeper, never to init, so the keeper's process tree holds
every process the command started for as long as the keeper lives:

- the command exits: everything it left is killed (SIGKILL), then the keeper exits
  with the command's status (its code, or its signal re-raised);
- a signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) reaches the keeper:
  it is passed on to every descendant that left the keeper's session (the server
  signals the session's members itself; a terminal's Ctrl-C must reach only its
  foreground group, so SIGINT is not passed on);
- the server dies (the parent-death signal, SIGTERM, arrives and the parent is
  no longer the one that started us): everything is killed and the keeper exits.

A SIGKILL of the keeper cannot be caught; the server therefore kills the
keeper's descendants itself before it kills the keeper (``kill.kill_tree``).
"""

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def descendants(root: int, procs=None) -> list[int]:
    """Live processes below ``root`` (from the parent links in /proc). ``procs``: rows of
    (pid, ppid, ...) of live processes, a process table the caller already took."""
    children: dict[int, list[int]] = {}
    for row in procs or ():
        children.setdefault(row[1], []).append(row[0])
    for entry in os.listdir("/proc") if procs is None else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def kill_all(me: int) -> None:
    """SIGKILL every descendant until none is left (a forking one is caught on a later round)."""
    for _ in range(100):
        found = descendants(me)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if not argv:
        print("keeper: no command given", file=sys.stderr)
        return 2
    me, parent = os.getpid(), os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"keeper: PR_SET_CHILD_SUBREAPER failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    session = os.getsid(0)

    def on_signal(signum: int, _frame: object) -> None:
        if os.getppid() != parent:  # the server died: nothing may outlive it
            kill_all(me)
            os._exit(128 + signum)
        if signum == signal.SIGINT:
            return
        for pid in descendants(me):
            try:
                if os.getsid(pid) != session:
                    os.kill(pid, signum)
            except OSError:
                pass

    for signum in FORWARDED:
        signal.signal(signum, on_signal)
    command = os.fork()
    if command == 0:
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"keeper: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    if os.getppid() != parent:  # died before the handler was in place
        kill_all(me)
        return 137
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == command:
            break
    kill_all(me)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset (found by testing:
            signal.signal(sig, signal.SIG_DFL)           # `kill -9 $$` made the keeper fail with a traceback)
        os.kill(me, sig)
        return 128 + sig
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

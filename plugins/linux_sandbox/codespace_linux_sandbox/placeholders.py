"""Placeholders for missing protected names, shared by concurrent commands.

Runs in the per-command helper (bubblewrap engine); the server sweeps what a killed
server's helpers left.

A mount needs a mount point, and inside a writable root the mount point is a directory
on the host: the helper creates it before bwrap runs (upstream does the same). It cannot be
made inside the sandbox alone: the sandbox sees the writable root through a bind mount of
the host's directory, so any directory it makes there is the host's; and removing the
placeholder on the host while a sandbox uses it would detach that sandbox's mask (the
kernel lazily unmounts mounts on a removed dentry).

Lifetime: every helper holds a shared ``flock`` on ``<run_dir>/placeholders.lock`` (:func:`hold`)
from before it looks for missing names until its command has ended, whether or not it makes any
placeholder, and appends each one it made to ``<run_dir>/placeholders.list``. From before the
look: another command's placeholder is found there as an existing directory and bound like one,
so it must stay while this command runs too (a helper that locked only for placeholders of its
own had bwrap bind a placeholder the clean-up of a command just ended was removing: "Can't find
source path <ws>/.aws", or, removed after the bind, a detached mask). Whoever can take the
lock exclusively removes every listed placeholder (only an empty directory without write
permission, as made here) and empties the list. That is the last
helper out, when it ends normally (exit, timeout, terminate: the helper forwards the signal
and returns); and the server (:func:`sweep`), after every sandboxed command has ended,
however it ended (a helper killed with SIGKILL, or killed with its cgroup), and when it
starts, for what a killed server's helpers left. A dead helper's lock goes with it.
"""


import posix

EWOULDBLOCK = 11
S_IFMT, S_IFDIR, S_IWUSR = 0o170000, 0o040000, 0o200
LOCK, LIST = "placeholders.lock", "placeholders.list"
_OPEN_FLAGS = posix.O_RDWR | posix.O_CREAT | posix.O_CLOEXEC | posix.O_NOFOLLOW


def _remove_listed(run_dir: str) -> None:
    """With the lock held exclusively: remove what the list names, then empty it."""
    try:
        fd = posix.open(f"{run_dir}/{LIST}", posix.O_RDWR | posix.O_CLOEXEC | posix.O_NOFOLLOW)
    except OSError:
        return
    try:
        data = b""
        while chunk := posix.read(fd, 65536):
            data += chunk
        paths = sorted({line for line in data.decode("utf-8", "surrogateescape").split("\n") if line.startswith("/")},
                       key=len, reverse=True)  # deepest first
        for path in paths:
            try:
                st = posix.lstat(path)
                if st.st_mode & S_IFMT == S_IFDIR and not st.st_mode & S_IWUSR:
                    posix.rmdir(path)  # only if still empty: never removes real content
            except OSError:
                pass
        posix.ftruncate(fd, 0)
    finally:
        posix.close(fd)


def sweep(run_dir: str, *, wait: bool = False) -> bool:
    """Remove the placeholders no running command needs (none, when one still runs: then the
    last one out does it). ``wait``: block until no command runs. True when it swept."""
    from . import libc

    try:
        lock = posix.open(f"{run_dir}/{LOCK}", _OPEN_FLAGS, 0o600)
    except OSError:
        return False
    try:
        if libc.flock(lock, libc.LOCK_EX if wait else libc.LOCK_EX | libc.LOCK_NB) != 0:
            return False
        _remove_listed(run_dir)
        return True
    finally:
        posix.close(lock)


def hold(run_dir: str) -> int:
    """The shared lock (a descriptor), taken before the helper looks for missing names: no
    placeholder it may find or make is removed while it is held. It waits for a sweep under
    way. A helper that fails before its command runs exits at once, and the lock goes with it."""
    from . import libc

    lock = posix.open(f"{run_dir}/{LOCK}", _OPEN_FLAGS, 0o600)
    if libc.flock(lock, libc.LOCK_SH) != 0:
        posix.close(lock)
        raise OSError(f"cannot take the shared lock {run_dir}/{LOCK}")
    return lock


class Placeholders:
    """Creates ``paths`` under ``lock`` (from :func:`hold`), which it owns from now on; on exit,
    the last one out removes every listed placeholder."""

    def __init__(self, run_dir: str, paths: list[str], lock: int) -> None:
        self.paths = paths
        self._lock = lock
        self._run_dir = run_dir

    def __enter__(self) -> "Placeholders":  # noqa: PYI034 - no typing import on the helper's path
        from . import libc

        self._libc = libc
        made = []
        for path in self.paths:
            try:
                posix.mkdir(path, 0o555)
            except FileExistsError:
                continue
            except OSError:
                # The server's user cannot create it, so neither can the sandboxed command
                # (same user, no capabilities); bwrap will skip nothing: it fails loudly.
                continue
            made.append(path)
        if made:
            # Listed before the command runs, in one write: whoever sweeps next finds them.
            fd = posix.open(f"{self._run_dir}/{LIST}", _OPEN_FLAGS | posix.O_APPEND, 0o600)
            try:
                posix.write(fd, "".join(f"{path}\n" for path in made).encode("utf-8", "surrogateescape"))
            finally:
                posix.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock < 0:
            return
        try:
            libc = self._libc
            if libc.flock(self._lock, libc.LOCK_EX | libc.LOCK_NB) == 0:
                _remove_listed(self._run_dir)
        finally:
            posix.close(self._lock)
            self._lock = -1

"""Placeholders for missing protected names, shared by concurrent commands.

A mount needs a mount point, and inside a writable root the mount point is a directory
on the host: the helper creates it before bwrap runs and removes it afterwards (upstream
does the same). Removing it while another sandbox still uses it as a mount point would
detach that sandbox's mask (the kernel lazily unmounts mounts on a removed dentry), so
every helper holds a shared ``flock`` on ``<run_dir>/placeholders.lock`` while its
command runs, and only a helper that can take the lock exclusively at the end removes
them. A helper that died leaves them behind; the next helper to finish removes them.
"""


import posix

EWOULDBLOCK = 11


class Placeholders:
    def __init__(self, run_dir: str, paths: list[str]) -> None:
        self.paths = paths
        self._lock = -1
        self._run_dir = run_dir

    def __enter__(self) -> "Placeholders":  # noqa: PYI034 - no typing import on the helper's path
        if not self.paths:
            return self
        from . import libc

        self._libc = libc
        self._lock = posix.open(f"{self._run_dir}/placeholders.lock",
                                posix.O_RDWR | posix.O_CREAT | posix.O_CLOEXEC | posix.O_NOFOLLOW, 0o600)
        libc.flock(self._lock, libc.LOCK_SH)
        for path in self.paths:
            try:
                posix.mkdir(path, 0o555)
            except FileExistsError:
                pass
            except OSError:
                # The server's user cannot create it, so neither can the sandboxed command
                # (same user, no capabilities); bwrap will skip nothing: it fails loudly.
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock < 0:
            return
        try:
            libc = self._libc
            if libc.flock(self._lock, libc.LOCK_EX | libc.LOCK_NB) == 0:
                for path in reversed(self.paths):
                    try:
                        posix.rmdir(path)  # only if still empty: never removes real content
                    except OSError:
                        pass
        finally:
            posix.close(self._lock)
            self._lock = -1

"""``[sandbox] max_processes`` for unsandboxed commands: a cgroup v1 ``pids`` group per command.

A sandboxed command's limit is counted in its own user namespace (the sandbox plugin); an
unsandboxed one had none, so its fork bomb took the host down. Where the host mounts a cgroup
v1 ``pids`` hierarchy the server may write (root on a host with hybrid cgroups, whose v2
hierarchy has no controllers), each unsandboxed command's cgroup (``tracking``) has a mirror
here, ``<pids dir>/cs-<state hash>-<server id>/c<n>``, with ``pids.max`` set; the command's
join stub enters it before the command starts, and its children inherit it. Not in the v2
hierarchy yet: there the pids controller must be enabled in the parent's
``cgroup.subtree_control``, which this machine class cannot grant, so it is not built
untested. A command that runs as root without a sandbox may write any ``cgroup.procs`` and
leave: the limit stops accidents, the sandbox stops intent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from . import cgroupfs

NONE = "none (sandboxed commands are limited by the sandbox): "


def pids_v1_dir() -> Path | None:
    """This process's cgroup directory in a mounted cgroup v1 ``pids`` hierarchy, or None."""
    mount = own = None
    root = "/"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = right.split()
                if len(fields) >= 3 and fields[0] == "cgroup" and "pids" in fields[2].split(","):
                    root, mount = left.split()[3:5]  # a container's mount may show only its own subtree
                    break
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "pids" in controllers.split(","):
                    own = path
    except (OSError, ValueError):
        return None
    if mount is None or own is None:
        return None
    if root != "/" and (own == root or own.startswith(root + "/")):
        own = own[len(root):] or "/"
    return Path(mount + own.rstrip("/")) if own != "/" else Path(mount)


class PidsLimit:
    """One server's directory in the pids hierarchy, or why there is none (``detail``)."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.detail = "not started"

    def start(self, name: str, stale: Callable[[Path], Iterable[Path]] | None = None) -> None:
        """Make the server's directory ``name``; first kill and remove the directories that
        ``stale(base)`` names (a dead server's)."""
        base = pids_v1_dir()
        if base is None:
            self.detail = f"{NONE}no cgroup v1 pids hierarchy is mounted, and the cgroup v2 pids controller is not used yet"
            return
        for gone in stale(base) if stale is not None else ():
            cgroupfs.kill_procs(gone)
            cgroupfs.remove_tree(gone)
        try:
            (base / name).mkdir(mode=0o755)
        except OSError as exc:
            self.detail = f"{NONE}cannot create a cgroup in {base} ({exc.strerror})"
            return
        self.directory = base / name
        self.detail = f"[sandbox] max_processes, as pids.max of a cgroup v1 pids group per command, in {base}"

    def limit(self, group: str, max_processes: int) -> None:
        """A mirror for the command cgroup named ``group``, holding ``max_processes`` at most."""
        assert self.directory is not None
        mirror = self.directory / group
        try:
            mirror.mkdir()
        except FileNotFoundError:  # removed under us (an operator's clean-up): make it again
            self.directory.mkdir(mode=0o755, exist_ok=True)
            mirror.mkdir()
        try:
            cgroupfs.write(mirror / "pids.max", str(max_processes))
        except OSError:
            cgroupfs.remove_tree(mirror)
            raise

    def mirror(self, group: str) -> Path | None:
        """The mirror of the command cgroup named ``group``, if its processes are limited."""
        if self.directory is None:
            return None
        mirror = self.directory / group
        return mirror if mirror.is_dir() else None

    def stop(self) -> None:
        """Kill what is left (emptied with the command cgroups, unless moved out of them) and
        remove the directory."""
        if self.directory is not None:
            cgroupfs.kill_procs(self.directory)
            cgroupfs.remove_tree(self.directory)
            self.directory = None

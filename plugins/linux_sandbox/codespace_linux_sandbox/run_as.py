"""The server's side of the command's host identity (see :mod:`.identity` for the helper's).

Runs in the server.

A server running as root never lets a command run as host root. It picks the command's ids
per workspace: the workspace owner's (uid and group of the workspace root) when that is not
root, so the command acts as the person whose files these are; otherwise the policy's
``[sandbox] run_as_uid``/``run_as_gid`` (default 65534, ``nobody``/``nogroup``: present in
every account database, so tools that look the user up still work, and owning nothing by
convention), seen through idmapped mounts so that the root-owned workspace stays writable
and what the command creates stays root's. The user namespace describing that mapping is
made once per (uid, gid) and sent to every helper; whether the workspace's file system
takes idmapped mounts is probed once, and what cannot be had is named in ``cannot_enforce``.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import threading
import time
from functools import cache
from pathlib import Path

from .capabilities import CAP_SETUID, CAP_SYS_ADMIN, capable
from .protocol import RunAs

_SYS_OPEN_TREE, _SYS_MOUNT_SETATTR = 428, 442
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _AT_EMPTY_PATH, _MOUNT_ATTR_IDMAP = 1, 0o2000000, 0x1000, 0x00100000
_lock = threading.Lock()
_userns: dict[tuple[int, int], int] = {}


def choose(root: Path | None, uid: int, gid: int) -> RunAs | None:
    """The command's ids for a workspace at ``root`` (None: the server is not root, the
    command runs as the server's own uid)."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.stat(root) if root is not None else None
    except OSError:
        st = None
    if st is not None and st.st_uid != 0:
        return RunAs(uid=st.st_uid, gid=st.st_gid if st.st_gid != 0 else st.st_uid, idmap=False)
    return RunAs(uid=uid, gid=gid, idmap=True)


def userns_fd(uid: int, gid: int) -> int:
    """A user namespace mapping ids 0 to host ``uid``/``gid`` (kept open for the server's life):
    ``unshare --user`` makes it, this process (root) writes its maps. Raises OSError."""
    key = (uid, gid)
    with _lock:
        if key in _userns:
            return _userns[key]
        own = os.readlink("/proc/self/ns/user")
        proc = subprocess.Popen(["unshare", "--user", "--", "cat"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True)
        try:
            deadline = time.monotonic() + 5
            while os.readlink(f"/proc/{proc.pid}/ns/user") == own or not _exec_done(proc.pid):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise OSError(f"unshare --user did not start: {proc.stderr.read().decode(errors='replace')}")
                time.sleep(0.001)
            for name, host in (("uid_map", uid), ("gid_map", gid)):
                with open(f"/proc/{proc.pid}/{name}", "w") as f:
                    f.write(f"0 {host} 1\n")
            fd = os.open(f"/proc/{proc.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            proc.stdin.close()
            proc.wait()
            proc.stderr.close()
        _userns[key] = fd
        return fd


def _exec_done(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "cat"
    except OSError:
        return False


@cache
def _idmap_problem(mount_dev: int, path: str, uid: int, gid: int) -> str | None:
    if not capable(CAP_SYS_ADMIN):
        return "the server lacks CAP_SYS_ADMIN (no mount namespace, no idmapped mount)"
    try:
        ns = userns_fd(uid, gid)
    except OSError as exc:
        return f"no user namespace for the id mapping ({exc})"
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    fd = lib.syscall(ctypes.c_long(_SYS_OPEN_TREE), -100, path.encode(), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)
    if fd < 0:
        return f"open_tree({path}) failed: {os.strerror(ctypes.get_errno())}"
    try:
        attr = _MOUNT_ATTR_IDMAP.to_bytes(8, "little") + bytes(16) + ns.to_bytes(8, "little")
        if lib.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), fd, b"", _AT_EMPTY_PATH, attr, len(attr)) != 0:
            return f"the file system of {path} takes no idmapped mount ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(fd)
    return None


def idmap_problem(path: str, uid: int, gid: int) -> str | None:
    """Why ``path``'s mount cannot be idmapped for (uid, gid) here, or None (probed once per file system)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    return _idmap_problem(dev, path, uid, gid)


def mounts_possible(run_as: RunAs | None) -> bool:
    """Whether the helpers (root here) may mount in a namespace of the command's: then the
    Landlock engine keeps protected names with read-only mounts (see ``landlock_mounts``)."""
    return run_as is not None and capable(CAP_SYS_ADMIN)


def cannot_enforce(run_as: RunAs | None, root: Path | None, engine: str) -> list[str]:
    """What the command's identity cannot be here, for ``workspace_info``/``codespace doctor``."""
    if run_as is None:
        return []
    out = []
    if not capable(CAP_SETUID):
        out.append("the server runs as root without CAP_SETUID: commands cannot be given an unprivileged uid, so "
                   "every sandboxed command is refused")
    if run_as.idmap:
        problem = idmap_problem("/", run_as.uid, run_as.gid) or (
            idmap_problem(str(root), run_as.uid, run_as.gid) if root is not None else None)
        if problem is not None:
            out.append(f"commands run as uid {run_as.uid} but {problem}: they cannot use root's files as their owner "
                       "(the root-owned workspace is not writable to them), and each command is refused")
    else:
        out.append(f"commands run as the workspace owner (uid {run_as.uid}, gid {run_as.gid}) with that user's "
                   "permissions: what only root may read (such as /root) is not readable to them")
    return out


def summary(run_as: RunAs | None, root: Path | None) -> tuple[bool, str]:
    """(fine, sentence) for ``codespace doctor``: who commands run as on the host."""
    if run_as is None:
        return True, f"commands run as the server's own uid {os.geteuid()} (not root)"
    problems = cannot_enforce(run_as, root, "")
    if run_as.idmap:
        # Found by testing from outside: "root's files (the workspace)" read as the workspace alone.
        text = (f"the server is root: commands run as uid {run_as.uid}, gid {run_as.gid}, never host root, and "
                "through idmapped mounts use root's files as their owner: whatever the policy lets them read or "
                "write, root's 0600 files outside the hidden paths among them, as the file tools can")
        return not problems, "; ".join([text, *problems])
    return True, (f"the server is root: commands run as the workspace owner, uid {run_as.uid}, gid {run_as.gid}, "
                  "never host root")

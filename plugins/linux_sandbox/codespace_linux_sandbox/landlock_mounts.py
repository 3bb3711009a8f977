"""Protected names as read-only mounts, for the Landlock engine when the server runs as root.

Runs in the per-command helper (:func:`plan`, :func:`usable`) and in the command's child
(:func:`apply`, before it drops its ids).

The same namespace gives the command a private ``/dev/shm`` (:data:`SHM`), which the Landlock
ruleset then grants whole; a command without one cannot write the host's.

Landlock can only grant, so on its own it keeps a protected name inside a writable root
read-only by *splitting* the root (:mod:`.landlock`): the root's own directory then gets no
right to create, rename or remove entries, and a command cannot even write ``f.txt`` at the
top of the workspace. A helper running as root has what bubblewrap uses instead: a mount
namespace of the command's own. There the child binds each existing protected path onto
itself read-only and covers each missing one (its first missing component, a placeholder
directory made by the helper, :mod:`.placeholders`) with an empty read-only tmpfs, as
bubblewrap does; the Landlock grant on the writable root is then whole. A mount point can be
neither removed nor renamed (EBUSY) and what is below it is read-only (EROFS), so the names
stay as protected as under bubblewrap. Deny-read paths inside writable roots still split the
root (Landlock hides them; a mask would do the same, but that is not needed here).

With an idmapped view (:mod:`.identity`) the child is already in a private mount namespace
and the binds keep the idmapping of the mount they clone; without one (the command runs as
the workspace owner) the child makes a private namespace first. All of it happens before
``landlock_restrict_self``, which forbids later mount changes, and before the ids drop.
"""


import posix

from . import libc
from .capabilities import has_cap_sys_admin
from .bwrap_argv import _is_dir, _owning_root, _walk_below

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND = 1, 2, 4, 4096
MOUNT_ATTR_RDONLY = 1
# POSIX shared memory and named semaphores (shm_open, sem_open: Python's multiprocessing locks)
# live here. The host's is shared by every process, so Landlock grants no right on it; in the
# command's own mount namespace it gets a private one instead, as under bubblewrap.
SHM = "/dev/shm"




def usable(run_as: dict | None) -> bool:
    """Whether the child can protect names with mounts: the helper is root (``run_as`` set)
    and holds CAP_SYS_ADMIN."""
    if run_as is None:
        return False
    return has_cap_sys_admin()


def plan(policy: dict) -> tuple[list[str], list[str]]:
    """(existing protected paths inside writable roots, first missing components of the
    others): what to bind read-only and what to cover with a read-only tmpfs."""
    writable = [w for w in policy["writable"] if _is_dir(w)]
    binds: list[str] = []
    missing: list[str] = []
    for path in policy["protected"]:
        root = _owning_root(path, writable)
        if root is None:
            continue  # outside every writable root: Landlock grants it no write right
        _, gap = _walk_below(root, path)
        if gap is None:
            binds.append(path)
        elif gap not in missing:
            missing.append(gap)
    return binds, missing


def _fail(what: str) -> None:
    from .identity import IdentityError

    raise IdentityError(f"{what} failed: {posix.strerror(libc.errno())} (protected names are made read-only "
                        "with mounts; the command did not run)")


def _read_only(path: bytes) -> None:
    # mount_setattr, unlike a read-only remount, also covers mounts below the path.
    attr = MOUNT_ATTR_RDONLY.to_bytes(8, "little") + bytes(24)
    if libc.syscall(libc.Long(libc.SYS_MOUNT_SETATTR), libc.AT_FDCWD, path, libc.AT_RECURSIVE, attr, len(attr)) != 0:
        _fail(f"making {path.decode(errors='replace')} read-only")


def apply(binds: list[str], missing: list[str], *, new_namespace: bool) -> list[str]:
    """In the child, as root: mount over the protected names (shallowest first, so a deeper
    one lands on top), and a private /dev/shm. ``new_namespace``: not yet in a private mount
    namespace. Returns the new writable mounts, for rules of their own (the ruleset's rules hold
    the inodes that were there before)."""
    if new_namespace:
        if libc.unshare(libc.CLONE_NEWNS) != 0:
            _fail("unshare(CLONE_NEWNS)")
        if libc.mount(b"none", b"/", None, libc.MS_REC | libc.MS_PRIVATE, None) != 0:
            _fail("making the mounts private")
    private = [SHM] if _is_dir(SHM) else []
    for path in private:
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777") != 0:
            _fail(f"mounting a private {path}")
    covered = set(missing)
    for path in sorted({*binds, *missing}, key=lambda p: p.count("/")):
        raw = path.encode("utf-8", "surrogateescape")
        if path in covered:
            if libc.mount(b"tmpfs", raw, b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"mode=0555") != 0:
                _fail(f"covering the missing protected name {path}")
            continue
        if libc.mount(raw, raw, None, MS_BIND | libc.MS_REC, None) != 0:
            _fail(f"binding the protected path {path}")
        _read_only(raw)
    return private

"""Who a sandboxed command is on the host, when the server runs as root (both engines).

Runs in the per-command helper, and in the command's child (Landlock engine:
:func:`become`, :func:`enter_idmapped_view`).

A command must never be host uid 0, even with every capability dropped: the kernel lets
the *global* root uid write ``/proc/sys`` (its check compares the euid with uid 0 of the
initial user namespace, so a user namespace mapping the command's uid to host 0 does not
help), and ``kernel.core_pattern`` pointed at a workspace script has the kernel run that
script as root with every capability. So a helper running as root starts the command as
``run_as`` (handshake ``options.run_as``: ``uid``, ``gid``, ``idmap``), which the server
chose: the workspace owner when that is not root (no id mapping: the command has that
user's permissions, and what it creates is that user's), else the policy's
``[sandbox] run_as_uid``/``run_as_gid`` (65534 by default) with ``idmap`` set.

With ``idmap`` the command sees the host through an *idmapped mount* of ``/``, read-only, and
one of every writable root, writable: on-disk uid 0 / gid 0 appear as ``run_as``, and what
``run_as`` creates is written to disk as 0 / 0. So the command has the file permissions the
owner bits give root (it traverses /root, runs an interpreter installed there, writes the
root-owned workspace) and the files it leaves belong to the workspace's owner, while the
kernel sees an unprivileged uid everywhere else (sysctls, /proc/sysrq-trigger, signals,
setuid binaries under no_new_privs). On-disk ids other than 0 are not mapped: such files
show as the overflow id and are never the command's own.

The idmapped tree lives in a mount namespace of the helper's (``unshare(CLONE_NEWNS)``,
everything private, so nothing propagates to the host): ``open_tree(OPEN_TREE_CLONE |
AT_RECURSIVE)`` clones ``/``, ``mount_setattr(MOUNT_ATTR_IDMAP)`` maps its top mount (proc,
sysfs and devtmpfs below cannot be idmapped; the sandbox replaces or hides them) and makes
it read-only (through the mapping the command owns every root-owned file, and
Landlock has no right for chmod, chown, extended attributes or times), each writable root is
cloned and idmapped from the host's tree, and the clone of ``/`` is attached over ``/``,
entered with ``chroot``, and the writable roots' clones attached on it. bwrap is spawned from there as
``run_as`` (real ids set, ``POSIX_SPAWN_RESETIDS``), and the helper returns to the host's
mount namespace with ``setns``; the Landlock engine's child enters the view for good
before it drops its ids. Cost: about 0.6 ms of system calls per command; the user
namespace that describes the mapping is made once per server (:mod:`.backend`) and sent
with each request, or made here (a fork, about 3 ms) by helpers started alone.
"""


import posix

from . import libc

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs time on every command
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")


class IdentityError(Exception):
    """The command's identity or its view of the host cannot be set up (nothing ran)."""


def _check(rc: int, what: str) -> int:
    if rc < 0:
        err = libc.errno()
        raise IdentityError(f"{what} failed: {posix.strerror(err)}")
    return rc


def make_userns(uid: int, gid: int) -> int:
    """A user namespace whose ids 0 map to host ``uid``/``gid`` (the mapping an idmapped mount
    takes), as a descriptor: a forked child unshares it and the parent writes its maps."""
    ready_r, ready_w = posix.pipe()
    done_r, done_w = posix.pipe()
    pid = posix.fork()
    if pid == 0:
        try:
            posix.close(done_w)
            posix.close(ready_r)
            code = 0 if libc.unshare(libc.CLONE_NEWUSER) == 0 else 1
            posix.write(ready_w, b"x" if code == 0 else b"!")
            posix.read(done_r, 1)
        finally:
            posix._exit(0)
    posix.close(ready_w)
    posix.close(done_r)
    try:
        if posix.read(ready_r, 1) != b"x":
            raise IdentityError("unshare(CLONE_NEWUSER) failed: no user namespace for the id mapping")
        for name, host in (("uid_map", uid), ("gid_map", gid)):
            fd = posix.open(f"/proc/{pid}/{name}", posix.O_WRONLY)
            try:
                posix.write(fd, f"0 {host} 1\n".encode())
            finally:
                posix.close(fd)
        return posix.open(f"/proc/{pid}/ns/user", posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError as exc:
        raise IdentityError(f"cannot make the user namespace for the id mapping: {exc}") from None
    finally:
        posix.close(ready_r)
        posix.close(done_w)
        posix.waitpid(pid, 0)


def map_every_id(pid: int) -> None:
    """Map every uid and gid of ``pid``'s (new) user namespace to the same host id: the Landlock
    command's own namespace (:func:`.landlock_child.enter_own_user_namespace`). Only a root
    helper may write such maps."""
    for name in ("uid_map", "gid_map"):
        fd = posix.open(f"/proc/{pid}/{name}", posix.O_WRONLY)
        try:
            posix.write(fd, b"0 0 4294967295\n")
        finally:
            posix.close(fd)


def userns_sync() -> "tuple[tuple[int, int], tuple[int, int]]":
    """Two pipes for :func:`map_every_id_when_asked` (the helper's ends) and
    :func:`.landlock_child.enter_own_user_namespace` (the child's): made before the fork."""
    unshared_r, unshared_w = posix.pipe()
    mapped_r, mapped_w = posix.pipe()
    return (unshared_r, mapped_w), (unshared_w, mapped_r)


def map_every_id_when_asked(child: int, ours: "tuple[int, int]", theirs: "tuple[int, int]") -> bool:
    """Once ``child`` says it has made its user namespace, map every id in it and tell it so;
    whether it was mapped. A child that dies first closes its end (an empty read)."""
    unshared_r, mapped_w = ours
    for fd in theirs:
        posix.close(fd)
    try:
        if posix.read(unshared_r, 1) != b"x":
            return False
        try:
            map_every_id(child)
        except OSError as exc:
            posix.write(2, f"codespace-linux-sandbox: cannot map the command's user namespace: {exc}\n".encode())
            posix.write(mapped_w, b"!")
            return False
        posix.write(mapped_w, b"x")
        return True
    except OSError:
        return False  # the child is gone: its exit status says why
    finally:
        posix.close(unshared_r)
        posix.close(mapped_w)


def _idmapped_clone(path: str, userns: int) -> int:
    fd = _check(libc.syscall(libc.Long(libc.SYS_OPEN_TREE), libc.AT_FDCWD, path.encode("utf-8", "surrogateescape"),
                             libc.OPEN_TREE_CLONE | libc.OPEN_TREE_CLOEXEC | libc.AT_RECURSIVE),
                f"open_tree({path})")
    attr = libc.MOUNT_ATTR_IDMAP.to_bytes(8, "little") + bytes(16) + userns.to_bytes(8, "little")
    if libc.syscall(libc.Long(libc.SYS_MOUNT_SETATTR), fd, b"", libc.AT_EMPTY_PATH, attr, len(attr)) != 0:
        err = libc.errno()
        posix.close(fd)
        raise IdentityError(f"the file system of {path} cannot be idmapped (mount_setattr: {posix.strerror(err)})")
    return fd


def _attach(fd: int, target: str) -> None:
    _check(libc.syscall(libc.Long(libc.SYS_MOVE_MOUNT), fd, b"", libc.AT_FDCWD,
                        target.encode("utf-8", "surrogateescape"), libc.MOVE_MOUNT_F_EMPTY_PATH),
           f"move_mount(onto {target})")


def enter_idmapped_view(userns: int, writable: list[str]) -> None:
    """Make this process's root an idmapped clone of ``/`` in a private mount namespace,
    read-only but for every writable root (``writable``; ``/`` among them: all of it), each
    on an idmapped clone of its own (module docstring)."""
    try:
        _enter_idmapped_view(userns, writable)
    except IdentityError as exc:
        raise IdentityError(f"the unprivileged uid cannot see the root-owned workspace as its own: {exc} (idmapped "
                            "mounts need CAP_SYS_ADMIN and a file system that takes them); refusing to run the "
                            "command, which never runs as host root") from None


def _enter_idmapped_view(userns: int, writable: list[str]) -> None:
    _check(libc.unshare(libc.CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, libc.MS_REC | libc.MS_PRIVATE, None), "making the mounts private")
    whole = "/" in writable
    clones: list[tuple[str, int]] = []
    try:
        # From the host's tree, before the view covers it: a clone of the view's would be
        # idmapped (and read-only) already.
        for path in [] if whole else _topmost([w for w in writable if posix.access(w, posix.F_OK)]):
            clones.append((path, _idmapped_clone(path, userns)))
        root = _idmapped_clone("/", userns)
        try:
            if not whole:
                # Through the mapping the command owns every root-owned file, and Landlock has no
                # right for chmod, chown, extended attributes or times: only a read-only mount
                # keeps those from host files (/etc/passwd made 0666 was host root for anyone).
                # The top mount only, the one mapped: below it proc (bwrap writes uid_map there),
                # sysfs and the other file systems are not mapped, so nothing there is the command's.
                _check(libc.syscall(libc.Long(libc.SYS_MOUNT_SETATTR), root, b"", libc.AT_EMPTY_PATH,
                                    _ATTR_READ_ONLY, len(_ATTR_READ_ONLY)), "mount_setattr(read-only)")
            _attach(root, "/")
            posix.fchdir(root)
            posix.chroot(".")
            posix.chdir("/")
        finally:
            posix.close(root)
        for path, fd in clones:
            _attach(fd, path)
    finally:
        for _, fd in clones:
            posix.close(fd)


_ATTR_READ_ONLY = libc.MOUNT_ATTR_RDONLY.to_bytes(8, "little") + bytes(24)  # struct mount_attr: attr_set only


def _topmost(paths: list[str]) -> list[str]:
    """``paths`` without those inside another of them (a clone of a root holds what is below it)."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path == top or path.startswith(top.rstrip("/") + "/") for top in kept):
            kept.append(path)
    return kept


class BwrapIdentity:
    """For the bubblewrap engine: around ``posix_spawn(resetids=True)`` of bwrap, the helper
    (root) is in the idmapped view with real ids ``run_as`` and no supplementary groups, so
    bwrap starts unprivileged as ``run_as``; then it returns to the host's mount namespace
    and to root."""

    def __init__(self, run_as: dict, userns: int | None, writable: list[str]) -> None:
        self.uid, self.gid, self.idmap = run_as["uid"], run_as["gid"], bool(run_as.get("idmap"))
        self.userns = userns
        self.writable = writable
        self._host_ns = -1
        self._cwd = -1
        self._groups: list[int] = []

    def prepare(self) -> None:
        """Everything that may fail, before anything is spawned."""
        if self.idmap and self.userns is None:
            self.userns = make_userns(self.uid, self.gid)

    def enter(self) -> None:
        if self.idmap:
            self._host_ns = posix.open("/proc/self/ns/mnt", posix.O_RDONLY | posix.O_CLOEXEC)
            self._cwd = posix.open(".", posix.O_RDONLY | posix.O_CLOEXEC | posix.O_DIRECTORY)
            enter_idmapped_view(self.userns, self.writable)
        self._groups = posix.getgroups()
        posix.setgroups([])
        posix.setresgid(self.gid, 0, 0)
        posix.setresuid(self.uid, 0, 0)

    def with_real_ids(self, call: "Callable[[], T]") -> "T":
        return with_real_ids(self.uid, self.gid, call)

    def leave(self) -> None:
        posix.setresuid(0, 0, 0)
        posix.setresgid(0, 0, 0)
        posix.setgroups(self._groups)
        if self._host_ns >= 0:
            _check(libc.setns(self._host_ns, libc.CLONE_NEWNS), "setns(the host's mount namespace)")
            posix.close(self._host_ns)
            self._host_ns = -1
        if self._cwd >= 0:
            posix.fchdir(self._cwd)
            posix.close(self._cwd)
            self._cwd = -1


def with_real_ids(uid: int, gid: int, call: "Callable[[], T]") -> "T":
    """``call()`` in the helper (root) with real ids ``uid``/``gid`` and no supplementary groups,
    effective ids still 0: what ``access`` checks, and what lets it ``prlimit`` a process of
    ``uid`` without CAP_SYS_RESOURCE (which a root server in a container may lack)."""
    groups = posix.getgroups()
    posix.setgroups([])
    posix.setresgid(gid, 0, 0)
    posix.setresuid(uid, 0, 0)
    try:
        return call()
    finally:
        posix.setresuid(0, 0, 0)
        posix.setresgid(0, 0, 0)
        posix.setgroups(groups)


def drop_unreachable(hs: dict, run_as: dict) -> dict:
    """``hs`` without the deny-read masks ``run_as`` could not reach anyway (below a directory it
    may not search, such as /root of a workspace owner's command): bwrap, running as
    ``run_as``, could not mount them there either. Checked with ``access``, which uses the real
    ids, set to ``run_as`` for the check."""
    deny = hs["policy"]["deny_read"]
    if not deny or run_as.get("idmap"):
        return hs  # idmap: root's directories are the command's, every mask is reachable
    kept = with_real_ids(run_as["uid"], run_as["gid"], lambda: [
        path for path in deny if posix.access(path.rsplit("/", 1)[0] or "/", posix.X_OK)])
    if len(kept) == len(deny):
        return hs
    return {**hs, "policy": {**hs["policy"], "deny_read": kept}}


def become(run_as: dict) -> None:
    """Drop to ``run_as`` for good (the Landlock engine's child, after its bounding set):
    no supplementary groups, every uid and gid set, so every capability goes with root."""
    posix.setgroups([])
    posix.setresgid(run_as["gid"], run_as["gid"], run_as["gid"])
    posix.setresuid(run_as["uid"], run_as["uid"], run_as["uid"])

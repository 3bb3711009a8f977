"""The broker's answers for sockets that stay inside the sandbox (see :mod:`.unix_broker`).

Runs in the per-command helper, on the broker's thread.

- :func:`connect` to a path inside a writable root of the command's view (or its private
  ``/tmp``): the path is made absolute against the calling thread's working directory and
  normalised, checked against the roots, then opened ``O_PATH`` from the command's own root
  (``/proc/<pid>/root``, so through the command's mounts) with ``RESOLVE_IN_ROOT |
  RESOLVE_NO_SYMLINKS``: no link anywhere on the way, so the inode reached is the one the
  checked name denotes, and a link swapped in at any moment fails with ``ELOOP``. The helper
  connects the command's socket (its duplicate) through ``/proc/self/fd/N``, to exactly that
  inode. When the helper is root, this thread takes the command's file-system ids and groups
  for the open and the connect, so the kernel checks search and write permission as it would
  for the command (a 0600 socket of another user in the workspace stays closed).
- :func:`socketpair` of the datagram kind: a seqpacket pair, added to the command's
  descriptors (``SECCOMP_IOCTL_NOTIF_ADDFD``). Both keep message boundaries and are reliable on
  AF_UNIX; a seqpacket socket ignores ``msg_name``, so it sends only to its peer.
- :func:`listen` (Landlock): only a socket bound to a pathname; its address is read from our
  duplicate, so no later change of the command's memory matters.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import socket
import stat
import struct

SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_IN_ROOT = 0x02, 0x04, 0x10
NOTIF_ADDFD = 0x40182103
SOCK_NONBLOCK, SOCK_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
SYS_CREDS = {"x86_64": {"setfsuid": 122, "setfsgid": 123, "setgroups": 116},
             "aarch64": {"setfsuid": 151, "setfsgid": 152, "setgroups": 159}}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def open_no_links(dirfd: int, path: str, resolve: int) -> int:
    """An O_PATH descriptor of ``path`` (from ``dirfd``), following no link of any kind: ELOOP."""
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | resolve)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), path.encode("utf-8", "surrogateescape"),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def within(path: str, rules: dict) -> bool:
    """``path`` (absolute, normalised) is inside a writable root or a private directory and not
    under an excluded path."""
    return any(_under(path, root) for root in (*rules.get("roots", ()), *rules.get("private", ()))) \
        and not any(_under(path, e) for e in rules.get("excluded", ()))


def private_only(path: str, rules: dict) -> str | None:
    """The private directory (a private ``/tmp``, ``TMPDIR``) holding ``path`` when no writable root
    does: a socket there must be on that directory's own file system. Found by testing from
    outside: a host directory the policy makes readable, bound back read-only under the private
    ``/tmp``, let a command connect to a host socket in it."""
    if any(_under(path, root) for root in rules.get("roots", ())):
        return None
    return next((p for p in rules.get("private", ()) if _under(path, p)), None)


def absolute(pid: int, path: str) -> str | None:
    """``path`` made absolute against thread ``pid``'s working directory and normalised; None
    when that directory has no name in the command's view."""
    if not path.startswith("/"):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return None
        if not cwd.startswith("/") or cwd.endswith(" (deleted)"):
            return None
        path = cwd + "/" + path
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/")  # normpath keeps a leading "//"


def connect(call, fd: int, path: str, rules: dict) -> int:
    """Connect the caller's ``fd`` to the socket ``path`` names inside the roots; 0 or an errno."""
    target = absolute(call.pid, path)
    if target is None or not within(target, rules):
        return errno.EPERM
    try:
        root = os.open(f"/proc/{call.pid}/root", os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return errno.ESRCH
    try:
        ids = _ids_of(call.pid)
        if not call.valid():
            return errno.ESRCH  # its root, directory and ids may not be the caller's
        sock = call.socket_of(fd)
        if isinstance(sock, int):
            return sock
        try:
            with _Acting(ids):
                pinned = open_no_links(root, target.lstrip("/") or ".", RESOLVE_IN_ROOT)
                try:
                    found = os.fstat(pinned)
                    if not stat.S_ISSOCK(found.st_mode):
                        return errno.ECONNREFUSED  # what connect() says for a file that is no socket
                    private = private_only(target, rules)
                    if private is not None and not _same_device(root, private, found.st_dev):
                        return errno.EPERM  # a host mount under the private directory
                    sock.connect(f"/proc/self/fd/{pinned}")
                finally:
                    os.close(pinned)
        except OSError as exc:
            return exc.errno or errno.ECONNREFUSED
        finally:
            sock.close()  # our duplicate only: the command's descriptor stays, now connected
    finally:
        os.close(root)
    return 0


def _same_device(root: int, directory: str, device: int) -> bool:
    """Whether ``directory`` (in the command's view, from ``root``) is on file system ``device``."""
    try:
        fd = open_no_links(root, directory.lstrip("/") or ".", RESOLVE_IN_ROOT)
    except OSError:
        return False
    try:
        return os.fstat(fd).st_dev == device
    finally:
        os.close(fd)


def _ids_of(pid: int) -> tuple[int, int, list[int]] | None:
    """(fsuid, fsgid, groups) of thread ``pid``, as this process's user namespace sees them."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        return (int(fields["Uid"].split()[3]), int(fields["Gid"].split()[3]),
                [int(g) for g in fields.get("Groups", "").split()])
    except (KeyError, IndexError, ValueError):
        return None


class _Acting:
    """This thread with the command's file-system ids and groups (the helper is root), or as it
    is when they already match; else EACCES (the kernel would check other ids than ours)."""

    def __init__(self, ids: tuple[int, int, list[int]] | None) -> None:
        self.ids = ids
        self.switched = False
        self.groups: list[int] = []

    def __enter__(self) -> _Acting:
        if self.ids is None:
            raise OSError(errno.ESRCH, "the caller's ids are unknown")
        uid, gid, groups = self.ids
        if os.geteuid() != 0:
            if uid != os.geteuid() or gid != os.getegid():
                raise OSError(errno.EACCES, "the command's ids are not the helper's")
            return self
        numbers = SYS_CREDS[os.uname().machine]
        self.groups = os.getgroups()
        self.switched = True
        _set_groups(numbers["setgroups"], groups)
        _libc.syscall(ctypes.c_long(numbers["setfsgid"]), ctypes.c_uint(gid))
        _libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint(uid))
        # setfsuid reports the previous id whatever happens: check that the switch took
        if _libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint(0xFFFFFFFF)) != uid:
            self.__exit__()
            raise OSError(errno.EACCES, "cannot take the command's file-system ids")
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.switched:
            return
        numbers = SYS_CREDS[os.uname().machine]
        _libc.syscall(ctypes.c_long(numbers["setfsuid"]), ctypes.c_uint(0))
        _libc.syscall(ctypes.c_long(numbers["setfsgid"]), ctypes.c_uint(0))
        _set_groups(numbers["setgroups"], self.groups)
        self.switched = False


def _set_groups(number: int, groups: list[int]) -> None:
    # The raw call changes this thread only; glibc's setgroups() would change every thread.
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _libc.syscall(ctypes.c_long(number), ctypes.c_size_t(len(groups)), array) != 0:
        raise OSError(ctypes.get_errno(), "setgroups")


def socketpair(call, rules: dict) -> int:
    """A datagram socketpair: a seqpacket pair in the caller's descriptors, their numbers written to sv."""
    domain, kind, _protocol, sv = call.args[:4]
    flags = kind & ~0xF & 0xFFFFFFFF
    if domain != socket.AF_UNIX:
        return errno.EPERM
    if flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC):
        return errno.EINVAL
    ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        numbers = []
        for end in ours:
            if flags & SOCK_NONBLOCK:
                end.setblocking(False)
            request = struct.pack("=QIIII", call.ident, 0, end.fileno(), 0, os.O_CLOEXEC if flags & SOCK_CLOEXEC else 0)
            added = _libc.ioctl(call.listener, NOTIF_ADDFD, ctypes.create_string_buffer(request, len(request)))
            if added < 0:
                return ctypes.get_errno() or errno.EMFILE
            numbers.append(added)
    finally:
        for end in ours:
            end.close()
    if not call.write(sv, struct.pack("=ii", *numbers)):
        return errno.EFAULT
    return 0


def listen(call, rules: dict) -> int:
    """listen() on a socket bound to a pathname only (an abstract name is visible to the host)."""
    fd, backlog = call.args[0], ctypes.c_int(call.args[1] & 0xFFFFFFFF).value
    sock = call.socket_of(fd)
    if isinstance(sock, int):
        return sock
    try:
        name = sock.getsockname()
        if not name:
            return errno.EINVAL  # unbound: the kernel's own answer
        if not isinstance(name, str):
            return errno.EPERM  # abstract
        sock.listen(max(backlog, 0))
    except OSError as exc:
        return exc.errno or errno.EINVAL
    finally:
        sock.close()
    return 0

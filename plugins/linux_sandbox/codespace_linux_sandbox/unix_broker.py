"""Connections to the Unix sockets the policy lists (``network.allow_unix_sockets``), brokered.

Runs in the per-command helper (the broker, a thread) and in the command's child
(:func:`install`, the filter).

With the network off the ``restricted`` filter denies ``connect``. When the policy lists
sockets, the command gets ``restricted_unix`` instead (``connect`` allowed by that filter;
``socket()`` stays AF_UNIX stream/seqpacket only) plus a second filter, installed last in
the command's own process, that hands every ``connect`` to the helper as a seccomp user
notification. The helper (:func:`serve`, a thread) copies the address out of the command's
memory once, checks that the copy names a listed socket exactly, and then performs the
connect itself, on a duplicate of the command's socket (``pidfd_getfd``: the same open file)
and with its own copy of the address: the command never continues into the kernel with an
address it could have changed after the check (no ``SECCOMP_USER_NOTIF_FLAG_CONTINUE``).
Everything else is answered ``EPERM``: other paths, abstract names, relative paths. The
listed path is resolved by the helper, on the host: what the operator named.

The connection is made by the helper, so its peer credentials (``SO_PEERCRED``) are the
helper's, i.e. the server's user, not the command's (documented in the README).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import struct
import threading

SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
NR_CONNECT = {"x86_64": 42, "aarch64": 203}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_RET_ALLOW, SECCOMP_RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
PIDFD_THREAD = os.O_EXCL
NOTIF_SIZE, RESP_SIZE = 80, 24
SUN_PATH_MAX = 108

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def _program() -> bytes:
    """connect -> USER_NOTIF; everything else allowed (the other filter decides the rest, and
    kills a foreign architecture)."""
    machine = os.uname().machine
    ld_abs, jeq, ret = 0x20, 0x15, 0x06

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    return b"".join((
        op(ld_abs, 0, 0, 4),  # seccomp_data.arch
        op(jeq, 0, 3, AUDIT_ARCH[machine]),
        op(ld_abs, 0, 0, 0),  # seccomp_data.nr
        op(jeq, 0, 1, NR_CONNECT[machine]),
        op(ret, 0, 0, SECCOMP_RET_USER_NOTIF),
        op(ret, 0, 0, SECCOMP_RET_ALLOW),
    ))


def install(channel: int) -> None:
    """In the command's process, after every other filter and right before exec: add the
    notifying filter and send its listener to the helper over ``channel`` (a stream socket)."""
    program = _program()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=H6xQ", len(program) // 8, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog, len(fprog))
    listener = _libc.syscall(ctypes.c_long(SYS_SECCOMP[os.uname().machine]), ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                             ctypes.c_uint(SECCOMP_FILTER_FLAG_NEW_LISTENER), fprog_buffer)
    if listener < 0:
        raise OSError(ctypes.get_errno(), f"installing the connect broker failed: {os.strerror(ctypes.get_errno())}")
    try:
        # family, type and protocol given: a bare fileno= would ask getsockopt(), which the filter denies
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, fileno=os.dup(channel)) as sock:
            socket.send_fds(sock, [b"L"], [listener])
    finally:
        os.close(listener)
        os.close(channel)


def receive(channel: int) -> int | None:
    """In the helper: the listener the command's process sent, or None if it sent none."""
    with socket.socket(fileno=channel) as sock:
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
        except OSError:
            return None
    return fds[0] if fds else None


def start(channel: int, allowed: dict[str, str]) -> threading.Thread:
    """In the helper: a thread that waits for the listener on ``channel`` and then serves it
    (nothing, if the command's process ended before sending one)."""
    def run() -> None:
        listener = receive(channel)
        if listener is not None:
            serve(listener, dict(allowed))

    thread = threading.Thread(target=run, daemon=True, name="codespace-unix-broker")
    thread.start()
    return thread


def channel() -> tuple[int, int]:
    """(helper's end, command's end): a stream socketpair, the command's end inheritable."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.set_inheritable(True)
    return ours.detach(), theirs.detach()


def serve(listener: int, allowed: dict[str, str]) -> None:
    """Answer notifications until every process under the filter is gone."""
    try:
        while True:
            ready = select.poll()
            ready.register(listener, select.POLLIN)
            events = ready.poll()
            if any(mask & (select.POLLHUP | select.POLLERR) for _, mask in events):
                return
            notif = ctypes.create_string_buffer(NOTIF_SIZE)
            if _libc.ioctl(listener, NOTIF_RECV, notif) != 0:
                if ctypes.get_errno() in (errno.EINTR, errno.ENOENT):
                    continue  # interrupted, or the target died before we received it
                return
            ident, pid = struct.unpack_from("=QI", notif.raw)
            args = struct.unpack_from("=6Q", notif.raw, 16 + 16)
            error = _decide(listener, ident, pid, args, allowed)
            resp = ctypes.create_string_buffer(struct.pack("=QqiI", ident, 0, -error if error else 0, 0), RESP_SIZE)
            _libc.ioctl(listener, NOTIF_SEND, resp)  # ENOENT: the target is gone; nothing to do
    finally:
        os.close(listener)


def _decide(listener: int, ident: int, pid: int, args: tuple[int, ...], allowed: dict[str, str]) -> int:
    """0 when connected, else the errno for the command."""
    fd, address, length = args[0], args[1], min(args[2], 2 + SUN_PATH_MAX)
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            raw = mem.read(length)
    except (OSError, OverflowError, ValueError):
        return errno.EFAULT
    check = ctypes.c_uint64(ident)
    if _libc.ioctl(listener, NOTIF_ID_VALID, ctypes.byref(check)) != 0:
        return errno.ESRCH  # the process is gone: the memory read may not be its
    if len(raw) < 3 or int.from_bytes(raw[:2], "little") != socket.AF_UNIX or raw[2] == 0:
        return errno.EPERM  # not a Unix pathname (abstract names are never brokered)
    path = raw[2:].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    target = allowed.get(path)
    if target is None:
        return errno.EPERM
    return _connect(pid, fd, target)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


SYS_OPENAT2 = 437
RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS = 0x04, 0x02


def _open_no_links(path: str) -> int:
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)  # a link: ELOOP
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(-100), path.encode("utf-8", "surrogateescape"),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd


def _connect(pid: int, fd: int, path: str) -> int:
    pidfd = _libc.syscall(ctypes.c_long(SYS_PIDFD_OPEN), ctypes.c_int(pid), ctypes.c_uint(PIDFD_THREAD))
    if pidfd < 0:
        return errno.ESRCH
    try:
        dup = _libc.syscall(ctypes.c_long(SYS_PIDFD_GETFD), ctypes.c_int(pidfd), ctypes.c_int(fd), ctypes.c_uint(0))
        if dup < 0:
            return ctypes.get_errno() or errno.EBADF
    finally:
        os.close(pidfd)
    try:
        sock = socket.socket(fileno=dup)  # non-blocking if the command's socket is: it gets EINPROGRESS
    except OSError:
        os.close(dup)
        return errno.ENOTSOCK
    pinned = -1
    try:
        if sock.family != socket.AF_UNIX:
            return errno.EPERM
        # No symbolic link on the way (the server resolved the listed path): a command that can
        # write a directory on it cannot re-point the name at another socket. The O_PATH
        # descriptor pins the inode; connecting through /proc/self/fd reaches exactly that one.
        pinned = _open_no_links(path)
        sock.connect(f"/proc/self/fd/{pinned}")
    except OSError as exc:
        return exc.errno or errno.ECONNREFUSED
    finally:
        sock.close()  # our duplicate only: the command's descriptor stays, now connected
        if pinned >= 0:
            os.close(pinned)
    return 0

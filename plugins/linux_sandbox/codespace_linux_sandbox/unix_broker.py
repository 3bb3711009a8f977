"""The Unix-socket broker of every command run with the network off: seccomp user notification.

Runs in the per-command helper (the broker, a thread) and, under Landlock, in the command's
process (:func:`install`, the filter). Under bubblewrap the filter and the broker's thread start
from :mod:`.broker_filter`, which imports this module on that thread only.

The ``restricted`` filter allows ``socket()`` for AF_UNIX stream and seqpacket sockets only and
leaves ``connect``, datagram ``socketpair`` and (Landlock) ``listen`` to a second filter that
turns each into a user notification for the helper. The helper (:func:`serve`) never answers
``CONTINUE``: it does the call itself, on a duplicate of the command's socket (``pidfd_getfd``:
the same open file) and with its own copy of the address, so nothing the command changes after
the check (the address, from another thread; the descriptor number; a link in the path) matters.

- ``connect`` to a listed socket (``network.allow_unix_sockets``): the resolved host path.
- ``connect`` to a path inside a writable root of the command's view (:mod:`.unix_inside`).
- a datagram ``socketpair``: a seqpacket pair instead (:mod:`.unix_inside`). A datagram socket
  names its destination in ``sendmsg``'s ``msg_name``, which BPF cannot read, and sends to any
  host datagram socket it can name, socketpair or not; a seqpacket socket ignores ``msg_name``.
- ``listen`` (Landlock only: no network namespace keeps abstract names in): only a socket bound
  to a pathname. Under bubblewrap the abstract namespace is the sandbox's own.

Everything else is ``EPERM``: other paths, abstract names, relative paths that leave the roots.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import struct
import signal
import threading

from . import broker_filter, unix_inside
from .broker_filter import NR, install_before_spawn, program  # noqa: F401 - the broker's filter, here too

SYS_PIDFD_OPEN = 434
SYS_PIDFD_GETFD = 438
NOTIF_RECV, NOTIF_SEND, NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
PIDFD_THREAD = os.O_EXCL
NOTIF_SIZE, RESP_SIZE = 80, 24
SUN_PATH_MAX = 108

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def install(channel: int, listen: bool) -> None:
    """In the command's process (Landlock), after every other filter and right before exec: add
    the notifying filter and send its listener to the helper over ``channel`` (a stream socket)."""
    listener = broker_filter.install_filter(listen)
    try:
        # family, type and protocol given: a bare fileno= would ask getsockopt()
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


def start(channel: int, rules: dict) -> threading.Thread:
    """In the helper (Landlock): a thread that waits for the listener on ``channel`` and then
    serves it (nothing, if the command's process ended before sending one)."""
    def run() -> None:
        listener = receive(channel)
        if listener is not None:
            serve(listener, rules)

    thread = threading.Thread(target=run, daemon=True, name="codespace-unix-broker")
    # Started with every signal blocked (a thread inherits its creator's mask), so the kernel hands
    # the helper's signals to the main thread: one this thread took would trip Python's handler
    # without interrupting the main thread's waitpid, and run it only when the command had ended.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return thread


def channel() -> tuple[int, int]:
    """(helper's end, command's end): a stream socketpair, the command's end inheritable."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.set_inheritable(True)
    return ours.detach(), theirs.detach()


def serve(listener: int, rules: dict) -> None:
    """Answer notifications until every process under the filter is gone. ``rules``: ``listed``
    (address -> resolved host path), ``roots``, ``private`` and ``excluded`` (see :mod:`.unix_inside`),
    ``listen`` (whether listen is brokered)."""
    names = {number: name for name, number in NR[os.uname().machine].items()}
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
            ident, pid, _flags, nr = struct.unpack_from("=QIIi", notif.raw)
            args = struct.unpack_from("=6Q", notif.raw, 32)
            call = Call(listener, ident, pid, args)
            try:
                error = _HANDLERS.get(names.get(nr, ""), _refuse)(call, rules)
            except Exception:  # noqa: BLE001 - one bad call must not end the broker (the command would hang)
                error = errno.EPERM
            resp = ctypes.create_string_buffer(struct.pack("=QqiI", ident, 0, -error if error else 0, 0), RESP_SIZE)
            _libc.ioctl(listener, NOTIF_SEND, resp)  # ENOENT: the target is gone; nothing to do
    finally:
        os.close(listener)


class Call:
    """One notification: the calling thread, its arguments, and access to its memory and sockets."""

    __slots__ = ("args", "ident", "listener", "pid")

    def __init__(self, listener: int, ident: int, pid: int, args: tuple[int, ...]) -> None:
        self.listener, self.ident, self.pid, self.args = listener, ident, pid, args

    def valid(self) -> bool:
        """Still the same waiting call (so what was read from /proc/<pid> was its)."""
        check = ctypes.c_uint64(self.ident)
        return _libc.ioctl(self.listener, NOTIF_ID_VALID, ctypes.byref(check)) == 0

    def read(self, address: int, length: int) -> bytes | None:
        try:
            with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
                mem.seek(address)
                return mem.read(length)
        except (OSError, OverflowError, ValueError):
            return None

    def write(self, address: int, data: bytes) -> bool:
        try:
            with open(f"/proc/{self.pid}/mem", "r+b", buffering=0) as mem:
                mem.seek(address)
                return mem.write(data) == len(data)
        except (OSError, OverflowError, ValueError):
            return False

    def socket_of(self, fd: int) -> socket.socket | int:
        """Our duplicate of the caller's descriptor ``fd`` (the same open file), or an errno."""
        pidfd = _libc.syscall(ctypes.c_long(SYS_PIDFD_OPEN), ctypes.c_int(self.pid), ctypes.c_uint(PIDFD_THREAD))
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
        if sock.family != socket.AF_UNIX:
            sock.close()
            return errno.EPERM
        return sock


def _refuse(call: Call, rules: dict) -> int:
    return errno.EPERM


def _connect(call: Call, rules: dict) -> int:
    """0 when connected, else the errno for the command."""
    fd, address, length = call.args[0], call.args[1], min(call.args[2], 2 + SUN_PATH_MAX)
    raw = call.read(address, length)
    if raw is None:
        return errno.EFAULT
    if not call.valid():
        return errno.ESRCH  # the process is gone: the memory read may not be its
    if len(raw) < 3 or int.from_bytes(raw[:2], "little") != socket.AF_UNIX or raw[2] == 0:
        return errno.EPERM  # not a Unix pathname (abstract names are never brokered)
    path = raw[2:].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    target = rules.get("listed", {}).get(path)
    if target is None:
        return unix_inside.connect(call, fd, path, rules)
    sock = call.socket_of(fd)
    if isinstance(sock, int):
        return sock
    pinned = -1
    try:
        # No symbolic link on the way (the server resolved the listed path): a command that can
        # write a directory on it cannot re-point the name at another socket. The O_PATH
        # descriptor pins the inode; connecting through /proc/self/fd reaches exactly that one.
        pinned = unix_inside.open_no_links(-100, target, 0)
        sock.connect(f"/proc/self/fd/{pinned}")
    except OSError as exc:
        return exc.errno or errno.ECONNREFUSED
    finally:
        sock.close()  # our duplicate only: the command's descriptor stays, now connected
        if pinned >= 0:
            os.close(pinned)
    return 0


_HANDLERS = {"connect": _connect, "socketpair": unix_inside.socketpair, "listen": unix_inside.listen}

"""The seccomp programs (upstream's three modes and ``proxy_tcp``, CodeSpace's mode for
Landlock with a network allowlist), compiled once per mode in the server.

Runs in the server.

Binding: ``pyseccomp``, a ctypes wrapper of the system libseccomp (Debian ``libseccomp2``,
which apt itself depends on). libseccomp does what a hand-written BPF filter tends to get
wrong: the architecture check (x86_64 and aarch64 programs; a foreign ABI such as i386
``int 0x80`` or x32 is killed, exit 159, instead of slipping past the syscall numbers),
syscall numbers by name per architecture, and argument comparisons. It is used only here,
in the server (pydantic and ctypes are loaded anyway); the compiled program is cached and
handed to the helper as raw BPF, which bubblewrap loads with ``--seccomp FD`` and the
Landlock engine loads with ``prctl(PR_SET_SECCOMP)``. The helper never imports it.

Denied calls fail with ``EPERM``; everything else is allowed (upstream's default). One
deliberate exception: ``getpeername`` fails with ``ENOTSOCK``. With ``EPERM``, bash started
without ``SHLVL`` (CodeSpace's default environment) takes its stdin for a network connection
and sources ``~/.bashrc`` in every ``bash -c`` (upstream 0.171.0 does, observed). And
``sendto`` is denied only when it names a destination address: ``send()`` on a connected
socket is ``sendto(fd, buf, n, flags, NULL, 0)``, and denying it breaks socketpair traffic
such as asyncio's thread wake-ups, which hang forever (observed with the 0.171.0 binary:
``asyncio.to_thread`` never returns). With ``socket()`` limited to AF_UNIX and ``connect``
denied, a socket without a destination can only be a socketpair or an inherited one.

With the network off the filter is never alone: every command also gets the broker's filter
(:mod:`.unix_broker`), which decides ``connect``, datagram ``socketpair`` and, under Landlock,
``listen``; ``restricted`` must therefore allow them (an ``EPERM`` here would win over the
notification).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from functools import cache

AF_VSOCK = 40
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
_PTRACE = ("ptrace", "process_vm_readv", "process_vm_writev")
_IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")

MODES = ("restricted", "restricted_unix", "proxy_routed", "proxy_tcp", "vsock_restricted")
SOCK_STREAM, SOCK_TYPE_MASK = 1, 0xF
SOCK_SEQPACKET = 5
UNIX_CONNECTED_TYPES = (SOCK_STREAM, SOCK_SEQPACKET)
UNIX_BROKERED_PAIRS = (2, 3)  # SOCK_DGRAM, SOCK_RAW: the broker hands out a seqpacket pair
_NETWORK_OFF_DENIED = ("sendmmsg", "recvmmsg")
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000
CLONE_NEWUSER = 0x10000000
SET_ID_BITS = (stat.S_ISUID, stat.S_ISGID)
# The argument that carries a mode each call creates a file with or gives one (open and creat
# are x86_64 only: libseccomp leaves a name out where the architecture has no such call).
MODE_ARGUMENT = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
                 "mknod": 1, "mknodat": 2}
# Calls whose flags or mode sit in a struct, which BPF cannot read: refused whole, with ENOSYS,
# so that the C library falls back to the calls above (glibc does for both).
STRUCT_ARGUMENT = ("clone3", "openat2")
KEYRING_CALLS = ("add_key", "keyctl", "request_key")
ERRNO = {"getpeername": errno.ENOTSOCK, **dict.fromkeys(STRUCT_ARGUMENT, errno.ENOSYS)}  # every other: EPERM


class SeccompUnavailable(Exception):
    """libseccomp (or its binding) cannot be loaded here."""


def _binding():
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:
        raise SeccompUnavailable(
            f"cannot load libseccomp through pyseccomp ({exc}); install libseccomp2 (apt-get install libseccomp2)"
        ) from exc
    return pyseccomp


def mode_for(network: str, full_write: bool = False) -> str:
    """Upstream's choice: restricted when the network is off, proxy-routed behind the
    managed proxy, vsock-restricted with the network on unless the file system is fully writable."""
    if network == "off":
        return "restricted"
    if network == "proxy":
        return "proxy_routed"
    return "none" if full_write else "vsock_restricted"


def rules(mode: str) -> list[tuple[str, list[tuple[int, str, int, int]]]]:
    """(syscall, [(arg, op, value, mask)]) pairs that fail with EPERM in ``mode``; a list
    of conditions is ANDed, separate pairs are ORed. Plain data, so tests can read it."""
    out: list[tuple[str, list[tuple[int, str, int, int]]]] = []
    if mode in ("restricted", "restricted_unix"):
        # The network is off. connect(), datagram socketpair() and (Landlock) listen() are left to
        # the broker's user-notification filter (unix_broker.py), which every command with the
        # network off gets: a path inside a writable root, or a listed socket (restricted_unix).
        # bind, listen, accept, getsockname, shutdown and the socket options act on AF_UNIX
        # sockets only (socket() is limited to them) and name no destination.
        out += [(name, []) for name in _NETWORK_OFF_DENIED]
        out += [("getpeername", [])]  # fails with ENOTSOCK, see ERRNO
        out += [("sendto", [(4, "NE", 0, 0)])]  # only with a destination address, see the module docstring
        out += [("socket", [(0, "NE", socket.AF_UNIX, 0)]), ("socketpair", [(0, "NE", socket.AF_UNIX, 0)])]
        # CodeSpace addition: Unix sockets of the stream and seqpacket kinds only. A datagram
        # socket (SOCK_RAW is one too for AF_UNIX) names its destination in sendmsg's msg_name,
        # which BPF cannot read: it reached host sockets such as /dev/log, even from a
        # socketpair. A datagram socketpair is allowed here because the broker answers it with a
        # seqpacket pair (between ALLOW and USER_NOTIF the notification wins). See the README.
        out += [("socket", [(1, "MASKED_EQ", kind, SOCK_TYPE_MASK)])
                for kind in range(SOCK_TYPE_MASK + 1) if kind not in UNIX_CONNECTED_TYPES]
        out += [("socketpair", [(1, "MASKED_EQ", kind, SOCK_TYPE_MASK)])
                for kind in range(SOCK_TYPE_MASK + 1) if kind not in (*UNIX_CONNECTED_TYPES, *UNIX_BROKERED_PAIRS)]
    if mode in ("restricted", "restricted_unix", "proxy_routed", "proxy_tcp"):
        out += [(name, []) for name in _PTRACE]
    if mode in ("proxy_routed", "proxy_tcp"):
        # socket() only for AF_INET / AF_INET6 (to reach the proxy's listener); libseccomp takes
        # one comparison per argument and rule, so "neither 2 nor 10" is spelled out.
        out += [("socket", [(0, "LT", socket.AF_INET, 0)]), ("socket", [(0, "GT", socket.AF_INET6, 0)])]
        out += [("socket", [(0, "EQ", domain, 0)]) for domain in range(socket.AF_INET + 1, socket.AF_INET6)]
        out += [("socketpair", [(0, "NE", socket.AF_UNIX, 0)])]
    if mode == "proxy_tcp":
        # CodeSpace's mode for Landlock (no network namespace): Landlock's rules cover TCP
        # only, so every other socket is refused here — UDP, raw and ICMP sockets by type,
        # SCTP and MPTCP by protocol — and so are TCP Fast Open sends, which connect without
        # going through connect().
        out += [("socket", [(1, "MASKED_EQ", kind, SOCK_TYPE_MASK)])
                for kind in range(SOCK_TYPE_MASK + 1) if kind != SOCK_STREAM]
        out += [("socket", [(2, "GT", IPPROTO_TCP, 0)])]
        out += [("socket", [(2, "EQ", protocol, 0)]) for protocol in range(1, IPPROTO_TCP)]
        out += [("sendto", [(3, "MASKED_EQ", MSG_FASTOPEN, MSG_FASTOPEN)]),
                ("sendmsg", [(2, "MASKED_EQ", MSG_FASTOPEN, MSG_FASTOPEN)]),
                ("sendmmsg", [(3, "MASKED_EQ", MSG_FASTOPEN, MSG_FASTOPEN)])]
        # And no listening: listen() on a socket never bound binds it to a free port on every
        # address of the host, and Landlock's bind rule never sees that (found by testing: a
        # peer elsewhere connected in). Only TCP sockets exist here, so nothing else needs it.
        out += [("listen", [])]
    if mode == "vsock_restricted":
        out += [("socket", [(0, "EQ", AF_VSOCK, 0)])]
    if mode in MODES:
        out += [(name, []) for name in _IO_URING]
        # CodeSpace addition: no typing into the terminal's input queue (TIOCSTI) or the
        # console's selection buffer (TIOCLINUX), even from a command sharing the host's tty.
        # The request is an int in the kernel: compare the low 32 bits only.
        out += [("ioctl", [(1, "MASKED_EQ", request, 0xFFFFFFFF)]) for request in (TIOCSTI, TIOCLINUX)]
        # CodeSpace addition: no user namespace of the command's own. In one it holds every
        # capability: mounts and chroot there change what a path names to the helper, which
        # resolves the command's paths through /proc/<pid>/root (the Unix-socket broker connected
        # host sockets that way), and file capabilities. Unprivileged, the other namespaces need
        # a user namespace first.
        out += [(name, [(0, "MASKED_EQ", CLONE_NEWUSER, CLONE_NEWUSER)]) for name in ("unshare", "clone")]
        # CodeSpace addition: no set-user-ID or set-group-ID bit. A root server's commands make
        # files the host sees as its owner's (the id mapping), and the host's mount of the
        # workspace need not be nosuid: such a bit would hand host root to whoever runs the file.
        out += [(name, [(arg, "MASKED_EQ", bit, bit)]) for name, arg in MODE_ARGUMENT.items() for bit in SET_ID_BITS]
        out += [(name, []) for name in STRUCT_ARGUMENT]
        # CodeSpace addition, as Docker's default profile: no kernel keyrings. They are not
        # namespaced: a command's keys would be visible to the next command and to every host
        # process of the uid it runs as (a root server's commands: the host's nobody).
        out += [(name, []) for name in KEYRING_CALLS]
    return out


@cache
def program(mode: str) -> bytes:
    """The BPF program for ``mode`` (cached for the server's lifetime)."""
    if mode not in MODES:
        raise ValueError(f"unknown seccomp mode {mode!r}")
    sc = _binding()
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    flt.set_attr(sc.Attr.CTL_NNP, 0)  # bwrap / the Landlock engine set no_new_privs themselves
    ops = {"EQ": sc.EQ, "NE": sc.NE, "LT": sc.LT, "GT": sc.GT, "MASKED_EQ": sc.MASKED_EQ}
    for name, conditions in rules(mode):
        args = []
        for arg, op, value, mask in conditions:
            args.append(sc.Arg(arg, ops[op], mask, value) if op == "MASKED_EQ" else sc.Arg(arg, ops[op], value))
        flt.add_rule(sc.ERRNO(ERRNO.get(name, errno.EPERM)), name, *args)
    sink = os.memfd_create("codespace-seccomp")  # a pipe could fill up before anyone reads it
    try:
        with os.fdopen(os.dup(sink), "wb") as out:
            flt.export_bpf(out)
        os.lseek(sink, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(sink, 65536):
            chunks.append(chunk)
    finally:
        os.close(sink)
    return b"".join(chunks)


def available() -> str | None:
    """None when programs can be compiled here, else why not."""
    try:
        program("restricted")
    except SeccompUnavailable as exc:
        return str(exc)
    except OSError as exc:
        return f"libseccomp cannot build the filter: {exc}"
    return None

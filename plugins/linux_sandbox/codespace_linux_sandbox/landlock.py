"""Landlock rules for the policy, at the best ABI the kernel offers.

Runs in the per-command helper (the ruleset) and in the command's child
(:func:`restrict_self`).

Landlock only grants: a rule gives a directory's whole hierarchy its rights, and nothing
can take them back lower down. A policy with exceptions inside a granted root (deny-read
``~/.ssh`` inside readable ``/``, protected ``.git`` inside a writable workspace) is
therefore *split*: the root itself gets only rights that suit every exception below it
(listing names; reading, when the exceptions are read-only), and each of its other
entries gets the full rights, recursively along the path to the exception. Entries
created later in a split directory get nothing, which is why, under this engine, a
writable root that holds protected names does not allow new entries directly in it, unless
the helper is root and read-only mounts keep those names instead (:mod:`.landlock_mounts`).

``/proc`` stays readable (commands need ``/proc/self``; other processes' sensitive files
are protected by Landlock's ptrace scoping); ``/dev`` is split and only the usual devices
are granted, like bubblewrap's minimal ``/dev``.
"""

from __future__ import annotations

import ctypes
import os
import stat

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64 and aarch64
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
CREATE_RULESET_VERSION = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
DEVICES = {  # bubblewrap's --dev set
    "/dev/null": "rw", "/dev/zero": "rw", "/dev/full": "rw", "/dev/random": "r", "/dev/urandom": "r",
    "/dev/tty": "rw", "/dev/ptmx": "rw", "/dev/pts": "rw",
}


class LandlockError(Exception):
    pass


def handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def rights(kind: str, abi: int) -> int:
    handled = handled_fs(abi)
    if kind == "r":
        return READ
    if kind == "list":
        return READ_DIR
    if kind == "dev_r":
        return READ_FILE
    if kind == "dev_rw":
        return (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) & handled
    return handled & ~(MAKE_CHAR | MAKE_BLOCK)  # "w": everything but creating device nodes


def _inside(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def plan(policy: dict, extra_writable: list[str], *, protected_by_mounts: bool = False) -> list[tuple[str, str]]:
    """(path, kind) rules for the policy; kind is r, w, list, dev_r or dev_rw.
    ``protected_by_mounts``: read-only mounts keep the protected names (:mod:`.landlock_mounts`),
    so they do not split the writable roots."""
    grants: dict[str, str] = {}
    for root in policy["readable"]:
        grants[root] = "r"
    for root in [*policy["writable"], *extra_writable]:
        grants[root] = "w"
    deny = [d for d in policy["deny_read"] if not _inside(d, "/proc")]
    if "/dev" not in deny:
        deny.append("/dev")
    # Exceptions: deny-read paths that exist (nothing to hide otherwise) and protected paths,
    # existing or not (a missing one must stay uncreatable).
    exceptions = {d: "none" for d in deny if _lstat(d) is not None}
    for path in () if protected_by_mounts else policy["protected"]:
        exceptions.setdefault(path, "r")
    rules: list[tuple[str, str]] = []
    for root, kind in sorted(grants.items()):
        if _lstat(root) is None:
            continue
        inner = {p: lvl for p, lvl in exceptions.items() if p != root and _inside(p, root)
                 and (lvl == "none" or kind == "w")}
        _split(root, kind, inner, rules)
    for device, mode in DEVICES.items():
        if _lstat(device) is not None:
            rules.append((device, "dev_rw" if mode == "rw" else "dev_r"))
    rules.append(("/proc", "r"))
    return rules


def _split(path: str, kind: str, inner: dict[str, str], rules: list[tuple[str, str]]) -> None:
    if not inner:
        rules.append((path, kind))
        return
    st = _lstat(path)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return
    rules.append((path, "list" if "none" in inner.values() else "r"))
    try:
        names = os.listdir(path)
    except OSError:
        return
    base = path.rstrip("/")
    for name in names:
        child = f"{base}/{name}"
        if child in inner:
            if inner[child] == "r" and kind == "w":
                rules.append((child, "r"))  # protected: readable, never writable
            continue
        below = {p: lvl for p, lvl in inner.items() if p.startswith(child + "/")}
        cst = _lstat(child)
        if cst is None or stat.S_ISLNK(cst.st_mode):
            continue  # a link's access is that of wherever it points
        _split(child, kind, below, rules)


class _Syscalls:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        self.prctl = libc.prctl
        self.prctl.restype = ctypes.c_int
        self.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def check(self, result: int, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise LandlockError(f"{what} failed: {os.strerror(err)}")
        return result


def abi() -> int:
    sc = _Syscalls()
    if os.uname().machine not in ("x86_64", "aarch64"):
        raise LandlockError(f"unsupported architecture {os.uname().machine}")
    return sc.check(sc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                               ctypes.c_uint32(CREATE_RULESET_VERSION)), "landlock_create_ruleset(VERSION)")


def abi_for(hs: dict) -> int:
    """The ABI a command's ruleset is made for: the kernel's, or the server's probe if lower."""
    given = hs["options"].get("landlock_abi")
    return abi() if given is None else min(given, abi())


def create_ruleset(rules: list[tuple[str, str]], abi_version: int, *, restrict_network: bool,
                   connect_ports: list[int] = ()) -> int:
    """A ruleset fd holding ``rules`` (restricted later, in the child, by :func:`restrict_self`);
    with ``restrict_network`` (ABI >= 4) TCP bind and connect are refused except connect to
    ``connect_ports``."""
    sc = _Syscalls()
    handled = handled_fs(abi_version)
    net = NET_BIND_TCP | NET_CONNECT_TCP if restrict_network and abi_version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi_version >= 6 else 0
    size = 24 if abi_version >= 6 else 16 if abi_version >= 4 else 8
    attr = (handled.to_bytes(8, "little") + net.to_bytes(8, "little") + scoped.to_bytes(8, "little"))[:size]
    buf = ctypes.create_string_buffer(attr, size)
    fd = sc.check(sc.syscall(ctypes.c_long(SYS_CREATE_RULESET), buf, ctypes.c_size_t(size), ctypes.c_uint32(0)),
                  "landlock_create_ruleset")
    try:
        add_path_rules(fd, rules, abi_version)
        for port in connect_ports if net else ():
            attr = ctypes.create_string_buffer(NET_CONNECT_TCP.to_bytes(8, "little") + port.to_bytes(8, "little"), 16)
            sc.check(sc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(fd), ctypes.c_int(RULE_NET_PORT),
                                attr, ctypes.c_uint32(0)), f"landlock_add_rule(TCP connect to port {port})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def add_path_rules(ruleset_fd: int, rules: list[tuple[str, str]], abi_version: int) -> None:
    """Add ``rules`` to the ruleset (until it is restricted). A rule holds the inode its path
    leads to now: one for a mount point made later must be added after the mount."""
    sc = _Syscalls()
    handled = handled_fs(abi_version)
    for path, kind in rules:
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            allowed = rights(kind, abi_version) & handled
            if not stat.S_ISDIR(os.fstat(target).st_mode):
                allowed &= FILE_RIGHTS
            if not allowed:
                continue
            beneath = ctypes.create_string_buffer(allowed.to_bytes(8, "little") + target.to_bytes(4, "little",
                                                                                                   signed=True), 12)
            sc.check(sc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset_fd), ctypes.c_int(RULE_PATH_BENEATH),
                                beneath, ctypes.c_uint32(0)), f"landlock_add_rule({path})")
        finally:
            os.close(target)


def restrict_self(ruleset_fd: int) -> None:
    sc = _Syscalls()
    sc.check(sc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
             "landlock_restrict_self")

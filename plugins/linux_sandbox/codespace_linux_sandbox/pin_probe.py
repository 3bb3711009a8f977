"""The probe matrix of docs/upstream-0.171.0.md, run *inside* a sandbox (ours or a release's ``codex sandbox``).

    python -I -S pin_probe.py OUTSIDE_DIR   (cwd: the workspace, which holds a .git directory)

Run as a script by path (the pin check and the tests); importing it runs nothing.

Prints one JSON object: probe name -> "ok" or the errno name (EROFS, EACCES, EPERM, ...),
and the NoNewPrivs / Seccomp / CapEff lines of /proc/self/status. Standard library only.
"""

import ctypes
import errno
import json
import os
import socket
import sys


def attempt(fn):
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"


def create(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"probe\n")
    os.close(fd)


def read(path):
    with open(path, "rb") as f:
        f.read(1)


def sock(family, kind=socket.SOCK_STREAM, proto=0):
    def run():
        socket.socket(family, kind, proto).close()
    return run


def create_and_leave_nothing(path):
    """``create``, then remove: a command that writes the host's /tmp (upstream's) left a file
    of the running user's there, which a later run as another user could not write."""
    create(path)
    try:
        os.unlink(path)
    except OSError:
        pass


def pair():
    a, b = socket.socketpair()
    a.close()
    b.close()


libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def checked(result):
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def ptrace_traceme():
    checked(libc.ptrace(0, 0, None, None))


def io_uring_setup():
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)  # the same number on x86_64 and aarch64
    checked(fd)
    os.close(fd)


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split()[1]
    return None


def main(outside: str) -> None:
    result = {
        "write_outside": attempt(lambda: create(os.path.join(outside, "probe-outside.txt"))),
        "write_cwd": attempt(lambda: create("probe-cwd.txt")),
        "write_cwd_subdir": attempt(lambda: create(os.path.join("sub", "probe-sub.txt"))),
        "write_tmp": attempt(lambda: create_and_leave_nothing(f"/tmp/probe-tmp-{os.getpid()}.txt")),
        "write_git": attempt(lambda: create(os.path.join(".git", "probe-git"))),
        "create_codex": attempt(lambda: create(os.path.join(".codex", "x"))),
        "mkdir_codex": attempt(lambda: os.mkdir(".codex")),
        "read_passwd": attempt(lambda: read("/etc/passwd")),
        "socket_inet": attempt(sock(socket.AF_INET)),
        "socket_inet6": attempt(sock(socket.AF_INET6)),
        "socket_netlink": attempt(sock(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
        "socket_unix": attempt(sock(socket.AF_UNIX)),
        "socketpair": attempt(pair),
        "ptrace": attempt(ptrace_traceme),
        "io_uring_setup": attempt(io_uring_setup),
        # Opened for writing, never written: a host sysctl (global root may write it, whatever namespace).
        "open_sysctl": attempt(lambda: os.close(os.open("/proc/sys/fs/lease-break-time", os.O_WRONLY))),
        "NoNewPrivs": status("NoNewPrivs"),
        "Seccomp": status("Seccomp"),
        "CapEff": status("CapEff"),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])

"""Run inside the sandbox: every way a command could leave a set-user-ID or set-group-ID file in
the workspace (whose files, under the id mapping of a root server, are host root's). argv[1]: a
directory in the workspace. Prints JSON: attempt -> "ok" or "errno N"."""

import ctypes
import json
import os
import stat
import sys

SYS = {"x86_64": {"open": 2, "creat": 85, "fchmodat2": 452, "openat2": 437, "clone3": 435},
       "aarch64": {"fchmodat2": 452, "openat2": 437, "clone3": 435}}[os.uname().machine]
AT_FDCWD = -100
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
here = sys.argv[1]
os.makedirs(here, exist_ok=True)
os.chdir(here)
out = {}


def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = f"errno {exc.errno}"


def raw(number, *args):
    if libc.syscall(ctypes.c_long(number), *args) < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def fresh(name):
    with open(name, "wb") as f:
        f.write(b"#!/bin/sh\n")
    return name


def fchmod(name, mode):
    fd = os.open(fresh(name), os.O_RDONLY)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


for bit, label in ((stat.S_ISUID, "setuid"), (stat.S_ISGID, "setgid")):
    mode = bit | 0o755
    attempt(f"chmod {label}", lambda: os.chmod(fresh(f"chmod-{label}"), mode))  # fchmodat
    attempt(f"fchmod {label}", lambda: fchmod(f"fchmod-{label}", mode))
    attempt(f"fchmodat2 {label}", lambda: raw(SYS["fchmodat2"], AT_FDCWD, fresh(f"fchmodat2-{label}").encode(), mode, 0))
    attempt(f"openat {label}", lambda: os.close(os.open(f"openat-{label}", os.O_CREAT | os.O_WRONLY, mode)))
    attempt(f"mknod {label}", lambda: os.mknod(f"mknod-{label}", stat.S_IFREG | mode))
    if "open" in SYS:
        attempt(f"open {label}", lambda: raw(SYS["open"], f"open-{label}".encode(), os.O_CREAT | os.O_WRONLY, mode))
        attempt(f"creat {label}", lambda: raw(SYS["creat"], f"creat-{label}".encode(), mode))
attempt("chmod plain", lambda: os.chmod(fresh("plain"), 0o700))
attempt("openat plain", lambda: os.close(os.open("plain-new", os.O_CREAT | os.O_WRONLY, 0o644)))
print(json.dumps(out))

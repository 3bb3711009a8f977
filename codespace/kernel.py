"""Probes of what this kernel offers a sandbox: Landlock, seccomp, user namespaces, bubblewrap.

Each probe is cheap, side-effect free for the calling process, and answers with a
value plus a reason, for ``codespace doctor`` and ``workspace_info``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_LANDLOCK_CREATE_RULESET_VERSION = 1
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Probe:
    ok: bool
    value: object
    detail: str


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> Probe:
    number = _SYS_LANDLOCK_CREATE_RULESET.get(platform.machine())
    if number is None:
        return Probe(False, None, f"unknown syscall number on {platform.machine()}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(number, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi >= 0:
        return Probe(True, int(abi), f"Landlock ABI {abi}")
    err = ctypes.get_errno()
    reason = {errno.ENOSYS: "kernel built without Landlock", errno.EOPNOTSUPP: "Landlock disabled at boot (lsm=)"}
    return Probe(False, None, reason.get(err, os.strerror(err)))


def seccomp_filter() -> Probe:
    # A NULL filter program makes the kernel fail with EFAULT when filter mode is
    # supported, and EINVAL when it is not; nothing is installed either way.
    libc = _libc()
    rc = libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, None, 0, 0)
    err = ctypes.get_errno()
    if rc != 0 and err == errno.EFAULT:
        return Probe(True, True, "seccomp filter mode available")
    return Probe(False, False, f"seccomp filter mode unavailable ({os.strerror(err) if rc else 'unexpected success'})")


def user_namespaces() -> Probe:
    """Try ``unshare(CLONE_NEWUSER)`` in a throw-away child process."""
    pid = os.fork()
    if pid == 0:  # child: never return into the caller's code
        code = 0 if _libc().unshare(_CLONE_NEWUSER) == 0 else 100 + ctypes.get_errno()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return Probe(True, True, "unprivileged user namespaces work")
    err = code - 100 if code >= 100 else 0
    hint = " (AppArmor's userns restriction or kernel.unprivileged_userns_clone=0?)" if err == errno.EPERM else ""
    return Probe(False, False, f"unshare(CLONE_NEWUSER) failed: {os.strerror(err) if err else code}{hint}")


def bubblewrap() -> Probe:
    path = shutil.which("bwrap")
    if path is None:
        return Probe(False, None, "bwrap not found on PATH")
    try:
        run = subprocess.run(
            [path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-user", "--unshare-pid", "--proc", "/proc",
             "--", "/bin/true"],
            capture_output=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(False, path, f"{path} cannot run: {exc}")
    if run.returncode != 0:
        return Probe(False, path, f"{path} failed: {run.stderr.decode(errors='replace').strip()[:200]}")
    return Probe(True, path, f"{path} works")

"""Which engine the sandbox uses here: the probes, made once per server, and the choice.

Runs in the server. bubblewrap is preferred where it works with the namespaces the engine
uses (upstream's ``/proc`` preflight, cached: without a fresh ``/proc`` when mounting it
fails); Landlock where the kernel offers it; both need the seccomp filters to compile. See
:mod:`.engines` for what each engine then runs, and where.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache

from . import seccomp
from .capabilities import has_cap_sys_admin

_PROC_FAILURE = ("Can't mount proc", "/newroot/proc")


@dataclass(frozen=True)
class BwrapProbe:
    path: str | None
    ok: bool
    mount_proc: bool
    detail: str


@cache
def may_make_user_namespaces() -> bool:
    """Whether helpers (this process's credentials) can give a Landlock command a user namespace
    of its own, in which its process limit counts: tried once per process, in a forked child,
    the way the command's child and its helper do it."""
    from . import identity
    from .landlock_child import enter_own_user_namespace  # loaded before the fork: the child imports nothing

    sync = identity.userns_sync() if os.geteuid() == 0 else None
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if sync:
                for fd in sync[0]:
                    os.close(fd)
            enter_own_user_namespace(sync[1] if sync else None)
            code = 0
        except (OSError, identity.IdentityError):
            pass
        finally:
            os._exit(code)
    if sync:
        identity.map_every_id_when_asked(pid, *sync)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@cache
def may_make_pid_namespaces() -> bool:
    """Whether helpers (this process's credentials) make bwrap PID 1 of a PID namespace of their
    own: with CAP_SYS_ADMIN, or (a server that is not root) inside a user namespace of their own
    (:func:`.supervise.own_user_namespace`). Asked once per process, of a forked child made
    non-dumpable as helpers are."""
    if has_cap_sys_admin():
        return True
    from . import libc, supervise  # loaded before the fork: the child imports nothing

    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            libc.prctl(libc.PR_SET_DUMPABLE, 0, 0, 0, 0)
            supervise.own_user_namespace()
            code = 0 if libc.unshare(libc.CLONE_NEWPID) == 0 else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@cache
def probe_bwrap() -> BwrapProbe:
    """bubblewrap with the namespaces the engine uses, once per server (upstream's /proc
    preflight, cached): if mounting proc fails, retry without ``--proc``."""
    path = shutil.which("bwrap")
    if path is None:
        return BwrapProbe(None, False, False, "bwrap not found on PATH (apt-get install bubblewrap)")
    base = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-user", "--unshare-pid", "--unshare-ipc",
            "--unshare-net", "--cap-drop", "ALL"]
    true = shutil.which("true") or "/bin/true"
    for mount_proc in (True, False):
        argv = [*base, *(["--proc", "/proc"] if mount_proc else []), "--", true]
        try:
            run = subprocess.run(argv, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return BwrapProbe(path, False, False, f"{path} cannot run: {exc}")
        if run.returncode == 0:
            note = "" if mount_proc else " (without a fresh /proc: mounting proc failed here)"
            return BwrapProbe(path, True, mount_proc, f"{path} works with user, pid, ipc and net namespaces{note}")
        err = run.stderr.decode(errors="replace").strip()
        if not (mount_proc and all(marker in err for marker in _PROC_FAILURE)):
            return BwrapProbe(path, False, False, f"{path} cannot create the sandbox: {err[:300]}")
    return BwrapProbe(path, False, False, f"{path} cannot create the sandbox")  # pragma: no cover


@cache
def landlock_abi() -> int | None:
    from . import landlock

    try:
        return landlock.abi()
    except landlock.LandlockError:
        return None


@dataclass(frozen=True)
class EngineChoice:
    engine: str
    available: bool
    detail: str
    mount_proc: bool = True
    bwrap: str | None = None


def choose_engine(preference: str) -> EngineChoice:
    problem = seccomp.available()
    bwrap = probe_bwrap() if preference in ("auto", "bubblewrap") else None
    abi = landlock_abi()
    if bwrap is not None and bwrap.ok:
        choice = EngineChoice("bubblewrap", True, bwrap.detail, bwrap.mount_proc, bwrap.path)
    elif preference in ("auto", "landlock") and abi is not None:
        why = f"; bubblewrap unusable: {bwrap.detail}" if bwrap is not None else ""
        choice = EngineChoice("landlock", True, f"Landlock ABI {abi} with seccomp and no_new_privs{why}")
    elif preference == "landlock":
        choice = EngineChoice("landlock", False, "the kernel offers no Landlock (needs Linux >= 5.13 with lsm=landlock)")
    else:
        detail = bwrap.detail if bwrap is not None else "bubblewrap not probed"
        if preference == "auto":
            detail += "; and the kernel offers no Landlock"
        choice = EngineChoice("bubblewrap", False, detail)
    if choice.available and problem is not None:
        return EngineChoice(choice.engine, False, f"seccomp filters cannot be built: {problem}")
    return choice

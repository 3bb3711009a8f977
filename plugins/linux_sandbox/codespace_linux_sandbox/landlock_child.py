"""The Landlock engine, command's child side: confine this process, then exec the command.

Runs in the command's child, forked by the per-command helper (:mod:`.landlock_engine`),
in order: ask for SIGKILL when the helper dies, restore the default signal dispositions,
enter the idmapped view (server as root), mount over the protected names
(server as root, :mod:`.landlock_mounts`), enter a user namespace of its own when the policy
limits its processes (:func:`enter_own_user_namespace`), drop every capability (the server may
run as root) and check none is left, set that limit, set ``PR_SET_NO_NEW_PRIVS``, restrict itself with the
helper's Landlock ruleset, install the seccomp program, add the Unix-socket broker's
filter when the policy lists sockets, and exec.
"""

from __future__ import annotations

import ctypes
import os
import signal

from . import identity, landlock, landlock_mounts, libc
from .supervise import FORWARDED, PYTHON_IGNORED

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class Libc:
    """libc through full ctypes, for the Landlock engine (the command's child and its helper)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def prctl(self, option: int, arg: int = 0) -> None:
        if self.lib.prctl(option, arg, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}) failed: {os.strerror(ctypes.get_errno())}")


def drop_capabilities(lib: Libc, run_as: dict | None = None) -> None:
    """Empty the effective, permitted, inheritable and ambient sets, and the bounding set
    when running as root (root regains the bounding set on exec); then check. ``run_as``:
    become those ids once the bounding set is empty (see :mod:`.identity`)."""
    root = os.getuid() == 0
    if root:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            lib.lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    if run_as is not None:
        identity.become(run_as)
        if 0 in os.getresuid() or 0 in os.getresgid():
            raise OSError(0, f"still root after dropping to uid {run_as['uid']}")
    lib.lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = ctypes.create_string_buffer(CAPABILITY_VERSION_3.to_bytes(4, "little") + bytes(4), 8)
    data = ctypes.create_string_buffer(24)
    if lib.lib.syscall(ctypes.c_long(SYS_CAPSET[os.uname().machine]), header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset(all empty) failed")
    names = ("CapEff", "CapPrm", "CapInh", "CapAmb", *(("CapBnd",) if root else ()))
    left = {name: hex(_caps(name)) for name in names if _caps(name)}
    if left:
        raise OSError(0, f"capabilities remain after dropping them: {left}")


def _caps(name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1], 16)
    return 0


def install_seccomp(lib: Libc, program: bytes) -> None:
    if len(program) % 8:
        raise ValueError("the seccomp program is not a whole number of BPF instructions")
    filt = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer((len(program) // 8).to_bytes(2, "little") + bytes(6)
                                        + ctypes.addressof(filt).to_bytes(8, "little"), 16)
    if lib.lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"installing the seccomp filter failed: {os.strerror(ctypes.get_errno())}")


def enter_own_user_namespace(sync: tuple[int, int] | None) -> None:
    """A user namespace of this command's own: RLIMIT_NPROC counts a uid's processes per user
    namespace, so in one that only this command's processes enter, ``[sandbox] max_processes``
    counts them alone, not every process of its uid on the host.

    Root (``sync``: the child's ends of :func:`.identity.userns_sync`): the helper writes an
    identity map of every id (:func:`.identity.map_every_id_when_asked`), so ids, file owners and the
    idmapped view look as they did; the command then becomes ``run_as`` inside it. Otherwise
    only this process's own uid and gid can be mapped (as bwrap maps them for a server that is
    not root): files of other ids show as the overflow id."""
    if sync is None:
        from .supervise import own_user_namespace

        if not own_user_namespace():
            raise identity.IdentityError("unshare(CLONE_NEWUSER) failed: no user namespace to count the command's "
                                         "processes in ([sandbox] max_processes)")
        return
    unshared, mapped = sync
    if libc.unshare(libc.CLONE_NEWUSER) != 0:
        raise identity.IdentityError(f"unshare(CLONE_NEWUSER) failed: {os.strerror(libc.errno())}")
    os.write(unshared, b"x")
    if os.read(mapped, 1) != b"x":
        raise identity.IdentityError("the helper could not map the ids of the command's user namespace")
    os.close(unshared)
    os.close(mapped)


def _exec(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Search PATH like execvp and exec; returns (exit code, message) when nothing ran."""
    program = argv[0]
    candidates = [program] if "/" in program else [
        f"{d or '.'}/{program}" for d in env.get("PATH", os.defpath).split(":")]
    denied = False
    for path in candidates:
        try:
            os.execve(path, argv, env)
        except OSError as exc:
            denied = denied or exc.errno == 13
    if denied:
        return 126, f"cannot run {program!r}: permission denied"
    return 127, f"cannot run {program!r}: command not found"


def confine_and_exec(hs: dict, ruleset_fd: int, program: bytes | None, parent: int, env: dict[str, str],
                     userns: int | None, broker: int = -1, mounts: tuple[list[str], list[str]] | None = None,
                     ns_sync: tuple[int, int] | None = None) -> None:
    """The command's child (never returns): confine this process as the module docstring says,
    exec. ``ns_sync``: see :func:`enter_own_user_namespace` (a root helper's)."""
    lib = Libc()
    run_as = hs["options"].get("run_as")
    max_processes = hs["options"].get("max_processes")
    try:
        lib.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        for signum in (*FORWARDED, *PYTHON_IGNORED):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        idmap = run_as is not None and bool(run_as.get("idmap"))
        if idmap:
            identity.enter_idmapped_view(userns, [*hs["policy"]["writable"], env["TMPDIR"]])
        if mounts is not None:
            private = landlock_mounts.apply(*mounts, new_namespace=not idmap)
            landlock.add_path_rules(ruleset_fd, [(path, "w") for path in private], landlock.abi_for(hs))
        os.chdir(hs["command"]["cwd"])
        if max_processes:
            enter_own_user_namespace(ns_sync)
        drop_capabilities(lib, run_as)
        if run_as is not None or max_processes:
            # A change of credentials clears the parent-death signal: ask again, and re-check
            # that the helper is still there (it may have died in between).
            lib.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)
        if max_processes:
            libc.limit_processes(0, max_processes)
        lib.prctl(libc.PR_SET_NO_NEW_PRIVS, 1)
        landlock.restrict_self(ruleset_fd)
        os.close(ruleset_fd)
        if program is not None:
            install_seccomp(lib, program)
        if broker >= 0:  # last: the network is off, the Unix-socket broker (see unix_broker)
            from . import unix_broker

            unix_broker.install(broker, listen=True)
    except (OSError, ValueError, landlock.LandlockError, identity.IdentityError) as exc:
        os.write(2, f"codespace-linux-sandbox: cannot confine the command: {exc}\n".encode())
        os._exit(125)
    code, message = _exec(hs["command"]["argv"], env)
    os.write(2, f"codespace-linux-sandbox: {message}\n".encode())
    os._exit(code)

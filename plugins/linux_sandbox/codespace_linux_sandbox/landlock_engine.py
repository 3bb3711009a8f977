"""The Landlock engine, for hosts where user namespaces are unavailable.

Process tree: the helper forks the command and stays its parent (no PID namespace, so
there is no PID 1 to hand this to). The helper builds the Landlock ruleset first (errors
are reported before anything runs); the child then, in order: asks for SIGKILL when the
helper dies, drops every capability (the server may run as root) and checks none is
left, sets ``PR_SET_NO_NEW_PRIVS``, restricts itself with Landlock, installs the seccomp
program and execs the command.

The command stays in the helper's session and process group, so the host's signals
(group and session sweep, Ctrl-C on a terminal) reach it directly and are not forwarded
a second time; the helper only forwards a signal when its own parent died (the server's
``PR_SET_PDEATHSIG`` reaches the helper alone), and then kills everything left after a
grace period. The helper is a child subreaper: orphaned descendants come back to it, and
when the command ends every descendant still running is killed, as the end of a PID
namespace would do. The command's exit status is the helper's own: its code, or its
terminating signal re-raised.

With network ``allowlist`` the helper registers with the command's proxy route first
(:mod:`.proxy_route`) and the ruleset allows TCP connect to that route's port only.
"""

from __future__ import annotations

import ctypes
import os
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

from . import identity, landlock, libc
from .supervise import FORWARDED, PYTHON_IGNORED, arm_parent_death_deadline, reraise_or_code

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class _Libc:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.lib.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def prctl(self, option: int, arg: int = 0) -> None:
        if self.lib.prctl(option, arg, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}) failed: {os.strerror(ctypes.get_errno())}")


def drop_capabilities(lib: _Libc, run_as: dict | None = None) -> None:
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


def install_seccomp(lib: _Libc, program: bytes) -> None:
    if len(program) % 8:
        raise ValueError("the seccomp program is not a whole number of BPF instructions")
    filt = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer((len(program) // 8).to_bytes(2, "little") + bytes(6)
                                        + ctypes.addressof(filt).to_bytes(8, "little"), 16)
    if lib.lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"installing the seccomp filter failed: {os.strerror(ctypes.get_errno())}")


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


def _child(hs: dict, ruleset_fd: int, program: bytes | None, parent: int, env: dict[str, str],
           userns: int | None, broker: int = -1) -> None:
    lib = _Libc()
    run_as = hs["options"].get("run_as")
    try:
        lib.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        for signum in (*FORWARDED, *PYTHON_IGNORED):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if run_as is not None and run_as.get("idmap"):
            identity.enter_idmapped_view(userns, [w for w in hs["policy"]["writable"] if w != "/"])
        os.chdir(hs["command"]["cwd"])
        drop_capabilities(lib, run_as)
        if run_as is not None:
            # A change of credentials clears the parent-death signal: ask again, and re-check
            # that the helper is still there (it may have died in between).
            lib.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)
        lib.prctl(libc.PR_SET_NO_NEW_PRIVS, 1)
        landlock.restrict_self(ruleset_fd)
        os.close(ruleset_fd)
        if program is not None:
            install_seccomp(lib, program)
        if broker >= 0:  # last: network.allow_unix_sockets (see unix_broker)
            from . import unix_broker

            unix_broker.install(broker)
    except (OSError, ValueError, landlock.LandlockError, identity.IdentityError) as exc:
        os.write(2, f"codespace-linux-sandbox: cannot confine the command: {exc}\n".encode())
        os._exit(125)
    code, message = _exec(hs["command"]["argv"], env)
    os.write(2, f"codespace-linux-sandbox: {message}\n".encode())
    os._exit(code)


def _descendants(root: int) -> list[int]:
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        found += kids
        frontier += kids
    return found


def _private_tmp(run_dir: str) -> str:
    base = "/tmp" if os.path.isdir("/tmp") else run_dir
    for _ in range(100):
        path = f"{base}/codespace-sandbox-{os.urandom(6).hex()}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"cannot create a private TMPDIR under {base}")


def run(hs: dict, seccomp_fd: int | None, fail: Callable[..., int], userns: int | None = None) -> int:
    abi = hs["options"].get("landlock_abi")
    try:
        abi = landlock.abi() if abi is None else min(abi, landlock.abi())
    except landlock.LandlockError as exc:
        return fail(f"Landlock is unavailable: {exc}")
    program = None
    if seccomp_fd is not None:
        with os.fdopen(seccomp_fd, "rb") as source:
            program = source.read()
    from .bwrap_argv import SetupError, check_links

    try:
        check_links(hs["policy"])
    except SetupError as exc:
        return fail(str(exc))
    route = hs["policy"].get("proxy") if hs["policy"]["network"] == "proxy" and abi >= 4 else None
    registration = None
    if route is not None:
        from . import proxy_route

        try:
            registration = proxy_route.register(route["socket"], announce=True)
        except RuntimeError as exc:
            return fail(str(exc))
    run_as = hs["options"].get("run_as")
    if run_as is not None and run_as.get("idmap") and userns is None:
        try:
            userns = identity.make_userns(run_as["uid"], run_as["gid"])
        except identity.IdentityError as exc:
            return fail(f"cannot run the command as an unprivileged user: {exc}")
    try:
        return _run(hs, abi, program, route, fail, userns)
    finally:
        if registration is not None:
            os.close(registration)  # the proxy releases this command's route


def _run(hs: dict, abi: int, program: bytes | None, route: dict | None, fail: Callable[..., int],
         userns: int | None) -> int:
    tmpdir = _private_tmp(hs["options"]["run_dir"])
    run_as = hs["options"].get("run_as")
    if run_as is not None and not run_as.get("idmap"):
        os.chown(tmpdir, run_as["uid"], run_as["gid"])  # with idmap, root's 0700 directory shows as run_as's
    env = dict(hs["command"]["env"])
    env["TMPDIR"] = tmpdir
    try:
        rules = landlock.plan(hs["policy"], [tmpdir])
        # Network 'proxy': TCP connect to the proxy's port for this command, nothing else
        # (seccomp's proxy_tcp filter refuses every other kind of socket).
        ruleset = landlock.create_ruleset(rules, abi, restrict_network=hs["policy"]["network"] != "on",
                                          connect_ports=[route["port"]] if route is not None else [])
    except (OSError, landlock.LandlockError) as exc:
        _remove_tree(tmpdir)
        return fail(f"cannot build the Landlock ruleset: {exc}")
    lib = _Libc()
    lib.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
    parent = os.getppid()
    received: list[int] = []
    child = 0

    armed = False

    def kill_everything() -> None:
        for pid in [child, *_descendants(me)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def on_signal(signum: int, frame: object) -> None:
        nonlocal armed
        received.append(signum)
        if os.getppid() != parent and child:  # the server died: pass its death signal on
            try:
                os.kill(child, signum)
            except OSError:
                pass
            if not armed:
                armed = True
                arm_parent_death_deadline(kill_everything)

    me = os.getpid()
    sockets = hs["policy"].get("allow_unix_sockets") or []
    if sockets:
        from . import unix_broker

        ours, theirs = unix_broker.channel()
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED))
    child = os.fork()
    if child == 0:
        _child(hs, ruleset, program, me, env, userns, theirs if sockets else -1)
    os.close(ruleset)
    if sockets:
        os.close(theirs)
        unix_broker.start(ours, sockets)
    for signum in FORWARDED:
        signal.signal(signum, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED))
    code = None
    while code is None:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
    # Background processes the command left: end them as the end of a PID namespace would.
    while True:
        for pid in _descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    _remove_tree(tmpdir)
    return reraise_or_code(code, received)


def _remove_tree(path: str) -> None:
    # Without shutil (its import costs more than the walk): the directory is ours, links are unlinked, not followed.
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass

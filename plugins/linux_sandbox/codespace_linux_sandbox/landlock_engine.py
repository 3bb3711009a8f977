"""The Landlock engine, per-command helper side, for hosts where user namespaces are unavailable.

Runs in the per-command helper. Process tree: the helper forks the command and stays its
parent (no PID namespace, so there is no PID 1 to hand this to). The helper hardens
itself, builds the Landlock ruleset first (errors are reported before anything runs) and
forks; the child confines itself and execs (:mod:`.landlock_child`).

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

import os
import signal

from . import identity, landlock, landlock_mounts, libc, placeholders, private_tmp
from .core_hardening import harden_or_fail
from .failure import fail
from .landlock_child import Libc, confine_and_exec
from .supervise import FORWARDED, arm_parent_death_deadline, reraise_or_code


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


def run_in_helper(hs: dict, seccomp_fd: int | None, *, hardened: bool, userns_fd: int | None = None) -> int:
    """Run the command of the checked handshake ``hs``; returns the helper's exit code.
    ``hardened``: this process already is (forked by the warm helper)."""
    if not hardened and (code := harden_or_fail()):
        return code
    try:
        abi = landlock.abi_for(hs)
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
    userns = userns_fd
    if run_as is not None and run_as.get("idmap") and userns is None:
        try:
            userns = identity.make_userns(run_as["uid"], run_as["gid"])
        except identity.IdentityError as exc:
            return fail(f"cannot run the command as an unprivileged user: {exc}")
    try:
        return _run(hs, abi, program, route, userns)
    finally:
        if registration is not None:
            os.close(registration)  # the proxy releases this command's route


def _run(hs: dict, abi: int, program: bytes | None, route: dict | None, userns: int | None) -> int:
    tmpdir, tmp_lock = private_tmp.make(hs["options"]["run_dir"])
    try:
        code, received = _run_with_tmp(hs, abi, program, route, userns, tmpdir)
    finally:
        private_tmp.remove(tmpdir, tmp_lock)
    return reraise_or_code(code, received)


def _run_with_tmp(hs: dict, abi: int, program: bytes | None, route: dict | None, userns: int | None,
                  tmpdir: str) -> tuple[int, list[int]]:
    """(exit code, signals received): the command's, or the helper's failure's."""
    run_as = hs["options"].get("run_as")
    if run_as is not None and not run_as.get("idmap"):
        os.chown(tmpdir, run_as["uid"], run_as["gid"])  # with idmap, root's 0700 directory shows as run_as's
    env = dict(hs["command"]["env"])
    env["TMPDIR"] = tmpdir
    mounts = None
    try:
        if landlock_mounts.usable(run_as):
            # Before the walk for missing names: see placeholders.py (what it finds stays until the end).
            lock = placeholders.hold(hs["options"]["run_dir"])
            mounts = landlock_mounts.plan(hs["policy"])
        rules = landlock.plan(hs["policy"], [tmpdir], protected_by_mounts=mounts is not None)
        # Network 'proxy': TCP connect to the proxy's port for this command, nothing else
        # (seccomp's proxy_tcp filter refuses every other kind of socket).
        ruleset = landlock.create_ruleset(rules, abi, restrict_network=hs["policy"]["network"] != "on",
                                          connect_ports=[route["port"]] if route is not None else [])
    except (OSError, landlock.LandlockError) as exc:
        return fail(f"cannot build the Landlock ruleset: {exc}"), []
    Libc().prctl(libc.PR_SET_CHILD_SUBREAPER, 1)
    if mounts is None:
        return _fork_and_supervise(hs, ruleset, program, env, userns)
    with placeholders.Placeholders(hs["options"]["run_dir"], mounts[1], lock):
        return _fork_and_supervise(hs, ruleset, program, env, userns, mounts)


def _fork_and_supervise(hs: dict, ruleset: int, program: bytes | None, env: dict[str, str],
                        userns: int | None, mounts: tuple[list[str], list[str]] | None = None) -> tuple[int, list[int]]:
    """Fork the command's child and wait for it; then end what it left. (exit code, signals received)."""
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
    brokered = hs["options"]["seccomp"] in ("restricted", "restricted_unix")  # the network is off
    if brokered:
        from . import unix_broker

        ours, theirs = unix_broker.channel()
    # A root helper maps the ids of the user namespace the child enters for its process limit
    # (landlock_child.enter_own_user_namespace): the child cannot map ids other than its own.
    sync = identity.userns_sync() if hs["options"].get("max_processes") and hs["options"].get("run_as") else None
    signal.pthread_sigmask(signal.SIG_BLOCK, set(FORWARDED))
    child = os.fork()
    if child == 0:
        confine_and_exec(hs, ruleset, program, me, env, userns, theirs if brokered else -1, mounts,
                         sync[1] if sync else None)
    os.close(ruleset)
    if brokered:
        os.close(theirs)
        policy = hs["policy"]
        unix_broker.start(ours, {
            "listed": policy.get("allow_unix_sockets") or {}, "roots": [w for w in policy["writable"] if w != "/"],
            "private": [env["TMPDIR"]], "excluded": [*policy["protected"], *policy["deny_read"]], "listen": True})
    for signum in FORWARDED:
        signal.signal(signum, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(FORWARDED))
    if sync:
        identity.map_every_id_when_asked(child, *sync)
    code = None
    while code is None:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
    _end_descendants(me)
    return code, received


def _end_descendants(me: int) -> None:
    """Background processes the command left: end them as the end of a PID namespace would."""
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

"""The bubblewrap engine, per-command helper side: build the sandbox with bwrap, supervise it.

Runs in the per-command helper. In order: take the placeholder lock, plan bwrap's mounts
(:mod:`.bwrap_argv`), register the command's proxy route, prepare the command's host
identity (server as root, :mod:`.identity`), then start bwrap as PID 1 of the helper's own
PID namespace and stay its parent (:mod:`.supervise`). The command's own child is bwrap's:
bwrap builds the namespaces, mounts, capabilities and seccomp filter itself; nothing of this
package runs inside. With the network off the Unix-socket broker's filter is added to the
helper's own thread right before it spawns bwrap (so bwrap and the command inherit it), and a
broker thread of the helper serves it (:mod:`.broker_filter`, then :mod:`.unix_broker`): no
process of ours inside.
"""


import posix

from . import bwrap_argv, supervise
from .bwrap_argv import SetupError
from .core_hardening import harden
from .failure import fail
from .identity import BwrapIdentity, IdentityError, drop_unreachable
from .placeholders import Placeholders, hold


def run_in_helper(hs: dict, seccomp_fd: int | None, *, hardened: bool, userns_fd: int | None = None) -> int:
    """Run the command of the checked handshake ``hs``; returns the helper's exit code.
    ``hardened``: this process already is (forked by the warm helper); else hardening overlaps
    bwrap's set-up."""
    bwrap = hs["options"].get("bwrap")
    if not bwrap:
        return fail("handshake field 'options.bwrap' is required by the bubblewrap engine")
    run_as = hs["options"].get("run_as")
    if run_as is not None:
        hs = drop_unreachable(hs, run_as)
    max_processes = hs["options"].get("max_processes")
    if max_processes is not None and not 1 <= max_processes <= 1 << 62:
        return fail(f"handshake field 'options.max_processes' must be a positive count of processes, not {max_processes}")
    route = hs["policy"].get("proxy") if hs["policy"]["network"] == "proxy" else None
    try:
        # Before the walk for missing names: see placeholders.py (what it finds stays until the end).
        lock = _hold_placeholder_lock(hs["options"]["run_dir"])
        plan = bwrap_argv.build(hs)
        registration = _register_route(route)
        identity = _identity(hs, userns_fd)
    except SetupError as exc:
        return fail(str(exc))
    extra = _identity_and_proc_args(hs, identity)

    def args_for(info_fd: int, block_fd: int) -> list[str]:
        return [*bwrap_argv.finish(plan, seccomp_fd=seccomp_fd, info_fd=info_fd, block_fd=block_fd), *extra]

    def open_proxy_listener(sandbox_pid: int) -> None:
        from . import proxy_route

        proxy_route.listen_inside(sandbox_pid, route["port"], registration)

    hardening = _HardenDuringSetup(hardened)
    command, pass_fds = hs["command"]["argv"], [] if seccomp_fd is None else [seccomp_fd]
    try:
        supervise.own_user_namespace()  # before the broker's thread: see there
    except OSError as exc:
        return fail(f"cannot map this helper's ids in its own user namespace: {exc.strerror or exc}")
    try:
        with Placeholders(hs["options"]["run_dir"], plan.placeholders, lock):
            if hs["options"]["seccomp"] in ("restricted", "restricted_unix"):
                _start_broker(hs)
            code, received = supervise.run_bwrap(
                bwrap, args_for, command, pass_fds, hardening,
                sandbox_ready=open_proxy_listener if route is not None else None, identity=identity,
                max_processes=max_processes,
                own_session=not plan.terminal)  # a terminal's command keeps it as controlling tty
    except (supervise.SandboxSetupError, IdentityError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot start the sandbox ({bwrap}): {exc.strerror or exc}")
    finally:
        if registration is not None:
            posix.close(registration)  # the proxy releases this command's route
    if hardening.failed is not None:
        return fail(*hardening.failed)
    return supervise.reraise_or_code(code, received)


def _hold_placeholder_lock(run_dir: str) -> int:
    try:
        return hold(run_dir)
    except OSError as exc:
        raise SetupError(f"cannot take the placeholder lock in {run_dir}: {exc}") from None


def _register_route(route: dict | None) -> int | None:
    """This command's registration with its egress-proxy route (network 'proxy'), or None."""
    if route is None:
        return None
    from . import proxy_route

    try:
        return proxy_route.register(route["socket"], announce=False)
    except RuntimeError as exc:
        raise SetupError(str(exc)) from None


def _identity(hs: dict, userns_fd: int | None) -> BwrapIdentity | None:
    """The command's host identity when the server runs as root (see :mod:`.identity`), or None."""
    run_as = hs["options"].get("run_as")
    if run_as is None:
        return None
    try:
        identity = BwrapIdentity(run_as, userns_fd, hs["policy"]["writable"])
        identity.prepare()
    except IdentityError as exc:
        raise SetupError(f"cannot run the command as an unprivileged user: {exc}") from None
    return identity


def _identity_and_proc_args(hs: dict, identity: BwrapIdentity | None) -> list[str]:
    extra = []
    if hs["options"].get("mount_proc", True):
        # bwrap covers /proc/sys only when it finds the directory writable, which a directory of
        # proc never is: its files stay writable to a uid the kernel takes for root.
        extra += ["--ro-bind", "/proc/sys", "/proc/sys"]
    if identity is not None and identity.idmap:
        extra += ["--uid", "0", "--gid", "0"]  # inside: ids 0, what the idmapped files show
    return extra


def _start_broker(hs: dict) -> None:
    """The network is off: the broker's filter on this thread (bwrap inherits it) and its thread."""
    from . import broker_filter

    policy = hs["policy"]
    roots = [w for w in policy["writable"] if w != "/"]
    try:
        broker_filter.install_before_spawn({
            "listed": policy.get("allow_unix_sockets") or {}, "roots": roots,
            "private": bwrap_argv.private_tmp_dirs(policy, hs["command"]["env"]),
            "excluded": [*policy["protected"], *policy["deny_read"]], "listen": False}, _serve_broker)
    except OSError as exc:
        raise supervise.SandboxSetupError(f"cannot broker Unix socket calls: {exc}") from None


def _serve_broker(fd: int, rules: dict) -> None:
    """The broker thread's work, loaded there (its modules cost the spawning thread nothing)."""
    from . import unix_broker

    unix_broker.serve(fd, rules)


class _HardenDuringSetup:
    """supervise.run_bwrap's ``after_spawn``: hardening overlaps bwrap's set-up (loading the FFI
    costs the better part of a millisecond); if it fails, the sandbox is killed before the
    helper goes on, and :attr:`failed` holds (message, exit code)."""

    def __init__(self, hardened: bool) -> None:
        self.hardened = hardened
        self.failed: tuple[str, int] | None = None

    def __call__(self, pid: int) -> None:
        if self.hardened:
            return
        self.failed = harden()
        if self.failed is not None:
            posix.kill(pid, 9)

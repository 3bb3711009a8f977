"""``codespace-linux-sandbox``: the helper, one process per sandboxed command.

It runs in one of two ways, with the same code and the same handshake (protocol v1):

- started by the server per command (``wrap``, terminal sessions and the fallback) as
  ``python -I -S .../codespace_linux_sandbox/__main__.py`` with the command's stdio and
  two inherited descriptors: the handshake (JSON) and, unless the policy needs none, the
  seccomp program (raw BPF), named by ``CODESPACE_FD_HANDSHAKE`` / ``CODESPACE_FD_SECCOMP``;
- forked by the warm helper (:mod:`.zygote`, the fast path ``launch``), which receives the
  same two descriptors and the command's stdio over its socket and calls :func:`run`.

Its own environment holds nothing else; the command's travels in the handshake.

Exit codes of the helper itself (the command's own code otherwise): 125 when the
handshake is refused or the sandbox cannot be built (the message, on stderr, names the
field, both protocol versions or the rule), 5 / 7 when hardening fails (upstream's codes),
126 / 127 when the command cannot be executed / is not found (Landlock engine; bwrap
reports its own).
"""


import posix
import sys

from . import handshake as hs_module
from .hardening import HardeningError, harden_self, remove_ld_variables

SETUP_FAILED_EXIT_CODE = 125
PROG = "codespace-linux-sandbox"


def _fail(message: str, code: int = SETUP_FAILED_EXIT_CODE) -> int:
    try:
        posix.write(2, f"{PROG}: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass
    return code


def _identity(hs: dict, userns_fd: int | None):
    """The command's host identity when the server runs as root (see :mod:`.identity`), or None."""
    run_as = hs["options"].get("run_as")
    if run_as is None:
        return None
    from .identity import BwrapIdentity

    identity = BwrapIdentity(run_as, userns_fd, [w for w in hs["policy"]["writable"] if w != "/"])
    identity.prepare()
    return identity


def _run_bubblewrap(hs: dict, seccomp_fd: int | None, hardened: bool, userns_fd: int | None = None) -> int:
    from . import bwrap_argv, supervise
    from .identity import IdentityError
    from .placeholders import Placeholders, hold

    bwrap = hs["options"].get("bwrap")
    if not bwrap:
        return _fail("handshake field 'options.bwrap' is required by the bubblewrap engine")
    run_as = hs["options"].get("run_as")
    if run_as is not None:
        from .identity import drop_unreachable

        hs = drop_unreachable(hs, run_as)
    try:
        # Before the walk for missing names: see placeholders.py (what it finds stays until the end).
        lock = hold(hs["options"]["run_dir"])
    except OSError as exc:
        return _fail(f"cannot take the placeholder lock in {hs['options']['run_dir']}: {exc}")
    try:
        plan = bwrap_argv.build(hs)
    except bwrap_argv.SetupError as exc:
        return _fail(str(exc))
    route = hs["policy"].get("proxy") if hs["policy"]["network"] == "proxy" else None
    registration = None
    if route is not None:
        from . import proxy_route

        try:
            registration = proxy_route.register(route["socket"], announce=False)
        except RuntimeError as exc:
            return _fail(str(exc))

    try:
        identity = _identity(hs, userns_fd)
    except IdentityError as exc:
        return _fail(f"cannot run the command as an unprivileged user: {exc}")
    extra = []
    if hs["options"].get("mount_proc", True):
        # bwrap covers /proc/sys only when it finds the directory writable, which a directory of
        # proc never is: its files stay writable to a uid the kernel takes for root.
        extra += ["--ro-bind", "/proc/sys", "/proc/sys"]
    if identity is not None and identity.idmap:
        extra += ["--uid", "0", "--gid", "0"]  # inside: ids 0, what the idmapped files show

    def args_for(info_fd: int, block_fd: int) -> list[str]:
        return [*bwrap_argv.finish(plan, seccomp_fd=seccomp_fd, info_fd=info_fd, block_fd=block_fd), *extra]

    hardening_failed: list[HardeningError] = []

    def harden(pid: int) -> None:
        # Hardening overlaps bwrap's set-up (importing the FFI costs the better part of a
        # millisecond); if it fails, the sandbox is killed before the helper goes on.
        if hardened:
            return
        try:
            harden_self()
        except HardeningError as exc:
            hardening_failed.append(exc)
            posix.kill(pid, 9)

    def open_proxy_listener(sandbox_pid: int) -> None:
        from . import proxy_route

        proxy_route.listen_inside(sandbox_pid, route["port"], registration)

    command, pass_fds = hs["command"]["argv"], [] if seccomp_fd is None else [seccomp_fd]
    sockets = hs["policy"].get("allow_unix_sockets")
    if sockets:  # network.allow_unix_sockets: the shim adds the broker's filter inside, then execs
        from . import unix_broker

        ours, theirs = unix_broker.channel()
        unix_broker.start(ours, sockets)
        shim = __file__.rpartition("/")[0] + "/unix_shim.py"
        command, pass_fds = [sys.executable, "-I", "-S", shim, str(theirs), "--", *command], [*pass_fds, theirs]
    try:
        with Placeholders(hs["options"]["run_dir"], plan.placeholders, lock):
            code, received = supervise.run_bwrap(
                bwrap, args_for, command, pass_fds, harden,
                sandbox_ready=open_proxy_listener if route is not None else None, identity=identity,
                own_session=not plan.terminal)  # a terminal's command keeps it as controlling tty
    except (supervise.SandboxSetupError, IdentityError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot start the sandbox ({bwrap}): {exc.strerror or exc}")
    finally:
        if registration is not None:
            posix.close(registration)  # the proxy releases this command's route
    if hardening_failed:
        return _fail(str(hardening_failed[0]), hardening_failed[0].exit_code)
    return supervise.reraise_or_code(code, received)


def run(raw: bytes, seccomp_fd: int | None, *, hardened: bool = False, userns_fd: int | None = None) -> int:
    """Check the handshake ``raw`` and run its command; ``seccomp_fd`` holds the BPF program.
    ``hardened``: this process is already hardened (forked by the warm helper); ``userns_fd``: the
    user namespace describing ``options.run_as``'s id mapping, when the server sent one."""
    try:
        hs = hs_module.decode(raw)
    except hs_module.HandshakeError as exc:
        return _fail(str(exc))
    if hs["options"]["seccomp"] != "none" and seccomp_fd is None:
        return _fail(f"the policy needs the {hs['options']['seccomp']} seccomp filter but the server sent none "
                     "(no seccomp descriptor); refusing to run unfiltered")
    if (hs["options"]["seccomp"] == "restricted_unix") != bool(hs["policy"].get("allow_unix_sockets")):
        return _fail("handshake fields 'options.seccomp' = 'restricted_unix' and 'policy.allow_unix_sockets' go "
                     "together (the filter leaves connect() to the broker of the listed sockets)")
    if hs["engine"] == "bubblewrap":
        return _run_bubblewrap(hs, seccomp_fd, hardened, userns_fd)
    if not hardened:
        try:
            harden_self()
        except HardeningError as exc:
            return _fail(str(exc), exc.exit_code)
    from .landlock_engine import run as run_landlock

    return run_landlock(hs, seccomp_fd, _fail, userns_fd)


def main(argv: list[str] | None = None) -> int:
    remove_ld_variables()
    zygote = posix.environ.get(b"CODESPACE_FD_ZYGOTE")
    if zygote is not None:
        from .zygote import serve

        return serve(zygote, posix.environ.get(b"CODESPACE_ZYGOTE_PARENT", b""))
    if (argv if argv is not None else sys.argv[1:]):
        return _fail("takes no arguments: the server passes the handshake on the descriptor named by "
                     "CODESPACE_FD_HANDSHAKE (protocol version 1)", 2)
    try:
        raw = hs_module.read_inherited("handshake")
    except hs_module.HandshakeError as exc:
        return _fail(str(exc))
    if raw is None:
        return _fail("no handshake: CODESPACE_FD_HANDSHAKE is not set (this helper is started by the "
                     "CodeSpace server, protocol version 1)", 2)
    return run(raw, hs_module.inherited_fd("seccomp"))

"""Hooks of the linux_sandbox plugin: the Sandbox backend, its services (the warm helper and
the egress proxy) and ``codespace doctor`` checks."""

from __future__ import annotations

from codespace import hookimpl

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True

# Every process that loads plugins imports this module, one-shot helpers included (the patch
# helper, to choose its file-system backend): the backend's modules (pydantic, anyio) load in
# the hooks below, never at import.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from codespace.contract import Check, SandboxLayout

    from .backend import LinuxSandbox


@hookimpl
def codespace_sandbox(workspace):
    from .backend import LinuxSandbox

    # Returned even when no engine works: the core's decision then names the reason
    # (info().detail) instead of "no sandbox plugin is installed".
    return LinuxSandbox.for_workspace(workspace)


def _warm_helper(sandbox: LinuxSandbox):
    import anyio

    async def warm_helper() -> None:
        """Start the warm helper with the server, not with its first command; stop it at shutdown."""
        if not sandbox.zygote.acquire():
            import logging

            logging.getLogger(__name__).warning("sandbox fast path unavailable: %s", sandbox.zygote.problem)
            return
        try:
            await anyio.to_thread.run_sync(sandbox.zygote.wait_ready)
            await anyio.sleep_forever()
        finally:
            sandbox.zygote.release()

    return warm_helper


LEFTOVER_SWEEP_S = (0.5, 60.0)  # retry interval, give up after (a dead server's helpers end within seconds)


def _leftover_sweep(sandbox: LinuxSandbox):
    import anyio

    async def leftover_sweep() -> None:
        """At start: remove the placeholders a killed server's helpers left in the workspace and
        their private TMPDIRs, once those helpers are gone (they hold locks while their commands run)."""
        interval, limit = LEFTOVER_SWEEP_S
        with anyio.move_on_after(limit):
            while not await anyio.to_thread.run_sync(sandbox.sweep_leftovers):
                await anyio.sleep(interval)

    return leftover_sweep


def _protected_walk(sandbox: LinuxSandbox, layout: SandboxLayout):
    import anyio

    async def protected_walk() -> None:
        """At start: find the protected names below each writable root before the first command
        needs them (a big tree takes a while; see protected_scan)."""
        await anyio.to_thread.run_sync(sandbox.walk_protected, layout, abandon_on_cancel=True)

    return protected_walk


@hookimpl
def codespace_services(workspace, backends, store):
    from codespace.contract import Refused

    from .backend import LinuxSandbox

    sandbox = backends.sandbox()
    if not isinstance(sandbox, LinuxSandbox):
        return None  # another plugin confines commands
    services = [_leftover_sweep(sandbox)]
    try:
        decision = backends.sandbox_decision()  # the core decides whether commands are confined, and to what
    except Refused:
        decision = None
    if decision is not None and decision.backend is sandbox and decision.layout is not None:
        services.append(_warm_helper(sandbox))
        services.append(_protected_walk(sandbox, decision.layout))
    if workspace.policy.network.access == "allowlist":
        services.append(sandbox.egress_proxy(store).run)
    return services


def _fast_path_check() -> Check:
    from codespace.contract import Check

    from .backend import helper_argv
    from .launcher import Zygote

    zygote = Zygote(helper_argv)
    try:
        ok = zygote.acquire() and zygote.wait_ready()
        detail = (f"the warm helper starts and answers (pid {zygote.pid}); each command forks from it"
                  if ok else f"unavailable ({zygote.problem}): each command starts a helper of its own (slower)")
    finally:
        zygote.release()
    return Check("sandbox fast path", ok, detail, "" if ok else "see the detail; commands still run sandboxed")


def _identity(sandbox: LinuxSandbox) -> tuple[bool, str, str]:
    from . import run_as

    ok, detail = run_as.summary(sandbox.run_as(), sandbox.root)
    return ok, detail, "" if ok else "use a file system with idmapped mounts (ext4, xfs, btrfs, tmpfs) for the workspace"


@hookimpl
def codespace_pin_checks():
    from .pin_check import checks  # the check's modules load only for `codespace pins check`

    return checks()


@hookimpl
def codespace_doctor(workspace):
    from codespace.contract import Check

    from .backend import LinuxSandbox, landlock_abi, probe_bwrap
    from .seccomp import available as seccomp_problem

    sandbox = LinuxSandbox.for_workspace(workspace)
    info = sandbox.info()
    abi = landlock_abi()
    bwrap = probe_bwrap()
    problem = seccomp_problem()
    checks = [
        Check("sandbox engine", info.available,
              f"{info.engine} (sandbox.engine = {workspace.policy.sandbox.engine!r}, Landlock ABI "
              f"{abi if abi is not None else 'none'}): {sandbox.choice().detail}",
              "" if info.available else "install bubblewrap (apt-get install bubblewrap) or use a kernel with Landlock"),
        Check("sandbox /proc preflight", bwrap.ok and bwrap.mount_proc,
              bwrap.detail, "" if bwrap.ok and bwrap.mount_proc else "commands see the host's /proc read-only"),
        Check("sandbox command identity", *_identity(sandbox)),
        Check("sandbox seccomp (libseccomp)", problem is None, problem or "filters compile (restricted, proxy-routed, "
              "proxy-tcp, vsock-restricted)", "" if problem is None else "apt-get install libseccomp2"),
    ]
    if info.available:
        checks.append(_fast_path_check())
        checks.append(Check(
            "sandbox cannot enforce", True,
            "; ".join(info.cannot_enforce) if info.cannot_enforce else "nothing: every policy rule is enforced",
        ))
    if workspace.policy.network.access == "allowlist" and info.available:
        landlock_ok = info.engine != "landlock" or (abi or 0) >= 4
        how = ("each command's own network namespace, reaching only its proxy listener" if info.engine == "bubblewrap"
               else "Landlock TCP rules: connect only to the command's proxy port")
        checks.append(Check(
            "sandbox egress proxy", landlock_ok,
            f"network.access = 'allowlist': commands reach allowlisted domains through the proxy ({how})"
            if landlock_ok else f"Landlock ABI {abi} < 4 cannot confine TCP: allowlisted commands get no network",
            "" if landlock_ok else "use bubblewrap or a kernel with Landlock ABI >= 4",
        ))
    return checks

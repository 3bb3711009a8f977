"""Hooks of the linux_sandbox plugin: the Sandbox backend and ``codespace doctor`` checks."""

from __future__ import annotations

from codespace import hookimpl
from codespace.doctor import Check

from .backend import LinuxSandbox, landlock_abi, probe_bwrap
from .seccomp import available as seccomp_problem


@hookimpl
def codespace_sandbox(workspace):
    # Returned even when no engine works: the core's decision then names the reason
    # (info().detail) instead of "no sandbox plugin is installed".
    return LinuxSandbox(preference=workspace.policy.sandbox.engine, state_dir=workspace.state_dir)


@hookimpl
def codespace_doctor(workspace):
    sandbox = LinuxSandbox(preference=workspace.policy.sandbox.engine, state_dir=workspace.state_dir)
    info = sandbox.info()
    abi = landlock_abi()
    bwrap = probe_bwrap()
    problem = seccomp_problem()
    checks = [
        Check("sandbox engine", info.available,
              f"{info.engine} (sandbox.engine = {workspace.policy.sandbox.engine!r}, Landlock ABI "
              f"{abi if abi is not None else 'none'}): {info.detail}",
              "" if info.available else "install bubblewrap (apt-get install bubblewrap) or use a kernel with Landlock"),
        Check("sandbox /proc preflight", bwrap.ok and bwrap.mount_proc,
              bwrap.detail, "" if bwrap.ok and bwrap.mount_proc else "commands see the host's /proc read-only"),
        Check("sandbox seccomp (libseccomp)", problem is None, problem or "filters compile (restricted, proxy-routed, "
              "vsock-restricted)", "" if problem is None else "apt-get install libseccomp2"),
    ]
    if info.available:
        checks.append(Check(
            "sandbox cannot enforce", True,
            "; ".join(info.cannot_enforce) if info.cannot_enforce else "nothing: every policy rule is enforced",
        ))
    return checks

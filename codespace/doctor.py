"""``codespace doctor``: is this host ready to serve a workspace, and if not, why."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from . import kernel
from .contract.checks import Check

if TYPE_CHECKING:
    from .app import App


def _python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, f"{sys.version.split()[0]} at {sys.executable}", "" if ok else "use Python 3.11 or newer")


def _mcp() -> Check:
    try:
        found = version("mcp")
    except PackageNotFoundError:
        return Check("mcp", False, "the mcp package is not installed", "pip install 'mcp>=2.3,<3'")
    major = found.split(".")[0]
    return Check("mcp", major == "2", f"mcp {found}", "" if major == "2" else "CodeSpace needs mcp 2.x")


def _plugins(app: App) -> list[Check]:
    checks = []
    for info in app.plugins.listing():
        if info.status == "failed":
            checks.append(Check(
                f"plugin {info.name}", False, info.error or "failed",
                f"fix or reinstall {info.distribution or info.name}, or block it: CODESPACE_PLUGINS_BLOCK={info.name}",
            ))
        else:
            pin = f", follows {info.pin}" if info.pin else ""
            problem = info.error or ""
            checks.append(Check(
                f"plugin {info.name}", not problem,
                f"{info.status}: {info.distribution} {info.version}{pin}" + (f"; {problem}" if problem else ""),
                "" if not problem else "report it to the plugin's authors",
            ))
    for kind, provider in app.backends.providers().items():
        if provider is None:
            checks.append(Check(f"backend {kind}", False, "no plugin provides it", "install the matching codespace-* plugin"))
        else:
            checks.append(Check(f"backend {kind}", True, f"provided by {provider}"))
    return checks


def _state(app: App) -> list[Check]:
    ws = app.workspace
    checks = [Check("policy", True, f"from {ws.policy_path}" if ws.policy_path else "defaults (no policy file)")]
    state = ws.state_dir
    try:
        ws.ensure_state_dir()
        mode = os.stat(state).st_mode & 0o777
        writable = os.access(state, os.W_OK)
    except OSError as exc:
        return [*checks, Check("state directory", False, f"{state}: {exc.strerror}", "pass --state-dir to a writable place")]
    checks.append(Check(
        "state directory", writable and mode == 0o700, f"{state} (mode {mode:04o}, hidden from the agent)",
        "" if writable and mode == 0o700 else f"chmod 0700 {state} and make it writable by this user",
    ))
    try:
        store = app.store.open_sync()
        try:
            journal = store.journal_mode_sync()
        finally:
            store.close_sync()
        checks.append(Check("operation store", journal == "wal", f"{store.path} (journal {journal})"))
    except Exception as exc:  # noqa: BLE001 - report, do not crash the doctor
        checks.append(Check("operation store", False, str(exc), "move the file aside or use another --state-dir"))
    return checks


def _kernel() -> list[Check]:
    landlock = kernel.landlock_abi()
    seccomp = kernel.seccomp_filter()
    userns = kernel.user_namespaces()
    bwrap = kernel.bubblewrap()
    return [
        Check("landlock", landlock.ok, landlock.detail, "" if landlock.ok else "boot with lsm=...,landlock (Linux >= 5.13)"),
        Check("seccomp", seccomp.ok, seccomp.detail, "" if seccomp.ok else "a kernel with CONFIG_SECCOMP_FILTER"),
        Check("user namespaces", userns.ok, userns.detail,
              "" if userns.ok else "sysctl kernel.unprivileged_userns_clone=1, or rely on the Landlock engine"),
        Check("bubblewrap", bwrap.ok, bwrap.detail, "" if bwrap.ok else "apt-get install bubblewrap"),
    ]


def _processes(app: App) -> list[Check]:
    """How the processes a command starts are found again to be killed, and whether an
    unsandboxed command's are limited."""
    tracker = app.processes.tracker
    mechanism, detail = tracker.probe()
    if mechanism != "cgroup":
        detail += (" (costs a Python start per command; a cgroup needs root, a delegated cgroup v2 subtree "
                   "the server runs in, or CODESPACE_CGROUP naming one it may write)")
    return [Check("process tracking", True, f"{mechanism}: {detail}"),
            Check("process limit of unsandboxed commands", True, tracker.limit_detail)]


def run_checks(app: App) -> list[Check]:
    return [_python(), _mcp(), *_plugins(app), *_state(app), *_processes(app), *_kernel(),
            *app.plugins.doctor(app.workspace)]

"""From the workspace policy to a sandbox decision and layout.

The same PathRules the gateway checks file tools against become the sandbox's
mounts (or Landlock rules), so a command cannot do what a file tool may not.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract.backends import SandboxDecision
from .contract.errors import Refused
from .contract.sandbox import SandboxLayout

if TYPE_CHECKING:
    from .contract.backends import Backends
    from .workspace import Workspace


def layout_for(workspace: Workspace) -> SandboxLayout:
    rules = workspace.paths
    readable = [r.path for r in rules.rules if r.access in ("read", "write")]
    writable = sorted((r.path for r in rules.rules if r.access == "write"), key=lambda p: p.count("/"))
    deny = [r.path for r in rules.rules if r.access == "none"]
    protected = []
    for root in writable:
        for entry in rules.protected_anchored:
            protected.append(os.path.join(root, *entry))
        for name in sorted(rules.protected_names):
            protected.append(os.path.join(root, name))
    protected += [r.path for r in rules.rules if r.access == "read" and any(r.path.startswith(w + "/") for w in writable)]
    network = {"off": "off", "allowlist": "proxy", "on": "on"}[workspace.policy.network.access]
    return SandboxLayout(
        readable=readable,
        writable=writable,
        deny_read=deny,
        protected=sorted(set(protected)),
        protected_names=sorted(rules.protected_names),
        network=network,
    )


def restricts_anything(layout: SandboxLayout) -> bool:
    return not ("/" in layout.writable and not layout.deny_read and not layout.protected and layout.network == "on")


def decide(workspace: Workspace, backends: Backends) -> SandboxDecision:
    """Which sandbox wraps commands, or why none does; refuses when one is required."""
    mode = workspace.policy.sandbox.mode
    if mode == "off":
        return SandboxDecision(None, "sandbox.mode = 'off': commands run unsandboxed")
    layout = layout_for(workspace)
    if mode == "auto" and not restricts_anything(layout):
        return SandboxDecision(None, "the policy restricts nothing a sandbox would enforce (sandbox.mode = 'auto')")
    backend = backends.sandbox()
    info = backend.info() if backend is not None else None
    engine = workspace.policy.sandbox.engine
    if info is not None and engine != "auto" and info.engines and engine not in info.engines:
        # A misspelt engine must not quietly weaken anything: refused in every mode but 'off'.
        raise Refused(
            "sandbox.engine",
            f"refused by policy: sandbox.engine = {engine!r} names no engine the sandbox plugin offers "
            f"({', '.join(info.engines)}). To proceed: ask the operator to set sandbox.engine to one of those or 'auto'.",
        )
    if backend is not None and info is not None and info.available:
        return SandboxDecision(backend, None, layout)
    reason = info.detail if info is not None else "no sandbox plugin is installed (codespace-linux-sandbox)"
    if mode == "required":
        raise Refused(
            "sandbox.mode",
            f"refused by policy: sandbox.mode = 'required' but no sandbox engine works here ({reason}). "
            "To proceed: ask the operator to install codespace-linux-sandbox or fix the host (codespace doctor).",
        )
    return SandboxDecision(None, f"running unsandboxed: {reason} (sandbox.mode = 'auto')")


# Upstream's heuristic for "the sandbox probably denied this": these words in the
# output of a failed command, or exit 159 (128 + SIGSYS, a seccomp kill).
DENIAL_MARKERS = ("operation not permitted", "permission denied", "read-only file system", "seccomp", "landlock")
SECCOMP_KILL_EXIT = 159
_NETWORK_MARKERS = (
    "network is unreachable", "could not resolve", "name or service not known", "temporary failure in name resolution",
    "failed to establish a new connection", "socket: operation not permitted", "connection refused",
)
_PATH = re.compile(r"(?<![\w.-])(/[^\s'\"`:;,()\[\]]+)")


@dataclass(frozen=True)
class DenialHint:
    likely: bool
    rule: str | None
    detail: str | None


def _denied_paths(output: str) -> list[str]:
    """Paths in the output, those right before a denial marker on the same line first:
    ``/bin/bash: line 1: /ws/.git/x: Read-only file system`` names .git/x, not /bin/bash."""
    near: list[str] = []
    for line in output.splitlines():
        low = line.lower()
        cut = min((low.find(m) for m in DENIAL_MARKERS if m in low), default=-1)
        if cut >= 0:
            near += reversed(_PATH.findall(line[:cut]))
    return near + [p for p in _PATH.findall(output) if p not in near]


def denial_hint(workspace: Workspace, output: str, exit_code: int | None) -> DenialHint | None:
    """For a failed sandboxed command: did the sandbox likely deny it, and under which rule?"""
    if exit_code in (None, 0):
        return None
    low = output.lower()
    likely = exit_code == SECCOMP_KILL_EXIT or any(marker in low for marker in DENIAL_MARKERS)
    network = workspace.policy.network.access
    if network != "on" and any(marker in low for marker in _NETWORK_MARKERS):
        return DenialHint(True, "network.access", f"network.access = {network!r}: direct connections are blocked"
                          + (" (only allowlisted domains through the proxy)" if network == "allowlist" else ""))
    if not likely:
        return DenialHint(False, None, None)
    for candidate in _denied_paths(output):
        path = os.path.normpath(candidate)
        refusal = workspace.paths.check_exact(path, "write")
        if refusal is not None:
            return DenialHint(True, refusal.rule, refusal.message)
    if exit_code == SECCOMP_KILL_EXIT:
        return DenialHint(True, "sandbox seccomp", "a system call the sandbox forbids (seccomp) killed the command")
    return DenialHint(True, None, "the sandbox probably denied an operation; see workspace_info for what is allowed")

"""From the workspace policy to a sandbox decision and layout.

The same PathRules the gateway checks file tools against become the sandbox's
mounts (or Landlock rules), so a command cannot do what a file tool may not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract import Refused, Sandbox, SandboxLayout

if TYPE_CHECKING:
    from .backends import Backends
    from .workspace import Workspace


@dataclass(frozen=True)
class SandboxDecision:
    backend: Sandbox | None
    note: str | None  # why a command runs unsandboxed, when it does


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


def decide(workspace: Workspace, backends: Backends) -> SandboxDecision:
    """Which sandbox wraps commands, or why none does; refuses when one is required."""
    mode = workspace.policy.sandbox.mode
    if mode == "off":
        return SandboxDecision(None, "sandbox.mode = 'off': commands run unsandboxed")
    backend = backends.sandbox()
    info = backend.info() if backend is not None else None
    if backend is not None and info is not None and info.available:
        return SandboxDecision(backend, None)
    reason = info.detail if info is not None else "no sandbox plugin is installed (codespace-linux-sandbox)"
    if mode == "required":
        raise Refused(
            "sandbox.mode",
            f"refused by policy: sandbox.mode = 'required' but no sandbox engine works here ({reason}). "
            "To proceed: ask the operator to install codespace-linux-sandbox or fix the host (codespace doctor).",
        )
    return SandboxDecision(None, f"running unsandboxed: {reason} (sandbox.mode = 'auto')")

"""The workspace as a plugin sees it: read-only, and only what mechanisms need."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..policy.model import Limits, Policy
    from ..policy.paths import PathRules


class WorkspaceView(Protocol):
    """The workspace a hook is called for. The core owns it; a plugin reads it and
    changes nothing (the policy is decided before a plugin sees it).

    Plugins read these policy sections: ``filesystem`` (e.g. ``symlinks``), ``network``
    (the allowlist the egress proxy enforces), ``sandbox`` (``engine``, ``run_as_uid``).
    """

    @property
    def root(self) -> Path:
        """The workspace directory, resolved (no symbolic link in it)."""

    @property
    def root_str(self) -> str:
        """``root`` as a string, for os calls: reading it loads no pathlib, which a one-shot
        helper process (the patch helper) cannot afford. Added in codespace 0.2."""

    @property
    def state_dir(self) -> Path:
        """The server's private directory for this workspace (mode 0700, hidden from the
        agent and from sandboxed commands). It may not exist yet: see :meth:`ensure_state_dir`."""

    @property
    def policy_path(self) -> Path | None:
        """The policy file the workspace was opened with (resolved), or None for the defaults:
        a helper process that must judge by the same rules loads this file itself."""

    @property
    def policy(self) -> Policy:
        """The workspace policy, validated."""

    @property
    def limits(self) -> Limits:
        """``policy.limits``: sizes and time-outs."""

    @property
    def paths(self) -> PathRules:
        """The path rules the gateway checks every path against. A backend that reaches a
        new object on its own (a followed link, an entry met in a walk) re-checks it here
        (``check_exact``) instead of deciding itself."""

    @property
    def patch_journal(self) -> Path:
        """Where the patch backend keeps the journal of an atomic commit (below ``state_dir``)."""

    def ensure_state_dir(self) -> Path:
        """Create ``state_dir`` (mode 0700) if needed and return it."""

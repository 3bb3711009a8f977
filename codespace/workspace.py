"""A workspace: its root, its policy resolved into rules, and its state directory."""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from .policy.plain import PlainDefaults
from .policy.paths import PathRule, PathRules, split_parts

if TYPE_CHECKING:
    from .policy import CommandRules, Limits, Policy

POLICY_FILE_IN_WORKSPACE = Path(".codespace") / "policy.toml"
PATCH_JOURNAL_DIR = "patch-journal"


class WorkspaceError(Exception):
    """The workspace cannot be served as configured; the message says how to fix it."""


def default_state_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "codespace"


def state_roots() -> list[Path]:
    """Where CodeSpace servers of this user keep state by default: every workspace's
    store and an HTTP server's bearer token live below one of these. Both spellings
    count, since another server may run with or without ``XDG_STATE_HOME``."""
    roots = [default_state_root(), Path(os.path.expanduser("~")) / ".local" / "state" / "codespace"]
    out: list[Path] = []
    for root in roots:
        real = Path(os.path.realpath(root))
        for candidate in (root, real):
            if candidate not in out:
                out.append(candidate)
    return out


def default_state_dir(root: Path) -> Path:
    import hashlib  # here: a helper told its state directory (CODESPACE_STATE_DIR) does without OpenSSL

    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", root.name or "root")[:40]
    return default_state_root() / "workspaces" / f"{name}-{digest}"


def _gitdir_of(root: Path) -> Path | None:
    """The directory a ``.git`` file points at (worktrees, submodules), which must be
    protected as much as a ``.git`` directory."""
    dotgit = root / ".git"
    try:
        if not dotgit.is_file() or dotgit.is_symlink():
            return None
        text = dotgit.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = line[len("gitdir:"):].strip()
            return Path(os.path.normpath(root / target))
    return None


class Workspace:
    """Immutable and compared by value, as the frozen dataclass it was; a plain class because
    loading ``dataclasses`` (and ``inspect``) cost a one-shot helper more than its patch."""

    _FIELDS = ("root", "policy", "policy_path", "state_dir", "paths")
    root: Path
    policy: Policy
    policy_path: Path | None
    state_dir: Path
    paths: PathRules

    def __init__(self, root: Path, policy: Policy, policy_path: Path | None, state_dir: Path, paths: PathRules) -> None:
        for name, value in zip(self._FIELDS, (root, policy, policy_path, state_dir, paths)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: a Workspace is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: a Workspace is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined] - as a dataclass compares

    def __hash__(self) -> int:
        return hash(self._values())

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, n) for n in self._FIELDS)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._FIELDS[:-1])  # paths: too long to show
        return f"Workspace({shown})"

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str] | None = None,
        *,
        policy_path: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        plain_defaults: bool = False,
    ) -> Workspace:
        """``plain_defaults``: without a policy file, hold the defaults as plain values
        (:class:`~codespace.policy.plain.PlainDefaults`) instead of the pydantic model,
        for a one-shot process that reads a few of them and must start fast."""
        root_path = Path(os.path.realpath(root if root is not None else os.getcwd()))
        if not root_path.is_dir():
            raise WorkspaceError(f"workspace {root_path} is not a directory; pass --workspace DIR")
        if policy_path is None and (root_path / POLICY_FILE_IN_WORKSPACE).is_file():
            policy_path = root_path / POLICY_FILE_IN_WORKSPACE
        resolved_policy = Path(os.path.realpath(policy_path)) if policy_path is not None else None
        if resolved_policy is None and plain_defaults:
            policy = PlainDefaults()
        else:
            from .policy.model import PolicyError, load_policy

            try:
                policy = load_policy(resolved_policy)
            except PolicyError as exc:
                raise WorkspaceError(str(exc)) from exc

        chosen = state_dir or os.environ.get("CODESPACE_STATE_DIR") or policy.store.state_dir
        state = Path(os.path.realpath(os.path.expanduser(chosen))) if chosen else default_state_dir(root_path)
        if root_path == state or root_path.is_relative_to(state):
            raise WorkspaceError(
                f"state directory {state} contains the workspace {root_path}; choose a directory outside it "
                "(--state-dir, CODESPACE_STATE_DIR or store.state_dir in the policy)"
            )

        extra = [PathRule(split_parts(str(state)), "none", "CodeSpace state directory")]
        # Other workspaces' stores and tokens: hidden from every workspace, whoever serves it.
        extra += [PathRule(split_parts(str(r)), "none", "CodeSpace state root") for r in state_roots()
                  if not (root_path == r or root_path.is_relative_to(r))]
        if policy.runtime.daemon_dir:
            daemon_dir = os.path.realpath(policy.runtime.daemon_dir)
            extra.append(PathRule(split_parts(daemon_dir), "none", "CodeSpace worker directory (runtime.daemon_dir)"))
        if resolved_policy is not None:
            extra.append(PathRule(split_parts(str(resolved_policy)), "read", "CodeSpace policy file"))
        gitdir = _gitdir_of(root_path)
        if gitdir is not None:
            extra.append(PathRule(split_parts(str(gitdir)), "read", "filesystem.protected (gitdir of .git)"))
        rules = PathRules.build(policy.filesystem, root_path, os.path.expanduser("~"), extra)
        if rules.access(str(state)) != "none":  # pragma: no cover - the rule above guarantees it
            raise WorkspaceError(f"state directory {state} would be reachable by the agent")
        return cls(
            root=root_path,
            policy=policy,
            policy_path=resolved_policy,
            state_dir=state,
            paths=rules,
        )

    @cached_property
    def commands(self) -> CommandRules:
        from .policy.commands import CommandRules

        return CommandRules(self.policy.commands)

    def hide(self, path: str | os.PathLike[str], source: str) -> None:
        """Hide one more path from the agent (a secret the server holds outside its state
        directory, e.g. an operator's ``--token-file``): file tools and later commands."""
        real = os.path.realpath(path)
        for candidate in {os.path.abspath(path), real}:
            self.paths.add(PathRule(split_parts(candidate), "none", source))

    @property
    def refuse_hardlinks(self) -> bool:
        """Should file reads refuse regular files with more than one link? Only when the
        operator asked (``filesystem.hardlinks = "refuse"``) and the policy hides something:
        another name of the file could then be one the agent may not read."""
        return self.policy.filesystem.hardlinks == "refuse" and any(r.access == "none" for r in self.paths.rules)

    @property
    def limits(self) -> Limits:
        return self.policy.limits

    @property
    def patch_journal(self) -> Path:
        return self.state_dir / PATCH_JOURNAL_DIR

    def ensure_state_dir(self) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.state_dir, 0o700)
        return self.state_dir

"""A workspace: its root, its policy resolved into rules, and its state directory.

Built with ``os.path`` on plain strings: the patch helper (``codespace-apply-patch``, a
one-shot ``python -I -S`` process) opens a workspace before every patch, and ``pathlib``
(with the ``re``, ``urllib.parse`` and ``ipaddress`` it loads) cost it more than its whole
patch. The public fields that are :class:`~pathlib.Path` objects (``root``, ``state_dir``,
``policy_path``) are made on first use; ``root_str`` gives the root without them.
"""

from __future__ import annotations

import os

from .policy.paths import PathRule, PathRules, split_parts
from .policy.plain import PlainDefaults

TYPE_CHECKING = False  # not typing's: importing typing costs the patch helper more than its patch
if TYPE_CHECKING:
    from pathlib import Path

    from .policy import CommandRules, Limits, Policy

POLICY_FILE_IN_WORKSPACE = os.path.join(".codespace", "policy.toml")
PATCH_JOURNAL_DIR = "patch-journal"


class WorkspaceError(Exception):
    """The workspace cannot be served as configured; the message says how to fix it."""


def _pure(path: str) -> str:
    """``str(PurePosixPath(path))``: repeated slashes and ``.`` parts dropped, ``..`` kept."""
    root = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return (root + "/".join(p for p in path.split("/") if p and p != ".")) or "."


def _state_root_str() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return _pure(os.path.join(base, "codespace"))


def default_state_root() -> Path:
    from pathlib import Path

    return Path(_state_root_str())


def _state_roots_str() -> list[str]:
    roots = [_state_root_str(), _pure(os.path.join(os.path.expanduser("~"), ".local", "state", "codespace"))]
    out: list[str] = []
    for root in roots:
        for candidate in (_pure(root), os.path.realpath(root)):
            if candidate not in out:
                out.append(candidate)
    return out


def state_roots() -> list[Path]:
    """Where CodeSpace servers of this user keep state by default: every workspace's
    store and an HTTP server's bearer token live below one of these. Both spellings
    count, since another server may run with or without ``XDG_STATE_HOME``."""
    from pathlib import Path

    out: list[Path] = []
    for root in _state_roots_str():
        if Path(root) not in out:
            out.append(Path(root))
    return out


def _sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()`` from CPython's own SHA-256 module where it has one:
    hashlib loads OpenSSL first, 3-4 ms of a one-shot helper's start (the patch command typed
    in a shell derives its state directory here), against 0.3-1 ms."""
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # CPython 3.12 and later
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()


def _default_state_dir_str(root: str) -> str:
    digest = _sha256_hex(os.fsencode(root))[:12]
    name = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in os.path.basename(root) or "root")
    return os.path.join(_state_root_str(), "workspaces", f"{name[:40]}-{digest}")


def default_state_dir(root: Path) -> Path:
    from pathlib import Path

    return Path(_default_state_dir_str(str(root)))


def _gitdir_of(root: str) -> str | None:
    """The directory a ``.git`` file points at (worktrees, submodules), which must be
    protected as much as a ``.git`` directory."""
    dotgit = os.path.join(root, ".git")
    try:
        if not os.path.isfile(dotgit) or os.path.islink(dotgit):
            return None
        with open(dotgit, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = line[len("gitdir:"):].strip()
            return os.path.normpath(os.path.join(root, target))
    return None


def _inside(path: str, directory: str) -> bool:
    """``Path(path).is_relative_to(directory)`` for normalised absolute paths."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


class Workspace:
    """Immutable and compared by value, as the frozen dataclass it was; a plain class because
    loading ``dataclasses`` (and ``inspect``) cost a one-shot helper more than its patch.

    The directories are held as normalised absolute strings; ``root``, ``state_dir`` and
    ``policy_path`` are :class:`~pathlib.Path` objects made on first use."""

    _FIELDS = ("root", "policy", "policy_path", "state_dir", "paths")
    policy: Policy
    paths: PathRules

    def __init__(
        self, root: str | os.PathLike[str], policy: Policy, policy_path: str | os.PathLike[str] | None,
        state_dir: str | os.PathLike[str], paths: PathRules,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "root_str", os.fspath(root))
        set_field(self, "policy", policy)
        set_field(self, "policy_path_str", None if policy_path is None else os.fspath(policy_path))
        set_field(self, "state_dir_str", os.fspath(state_dir))
        set_field(self, "paths", paths)

    root_str: str
    """The workspace directory, resolved, as a string (what os calls take): reading it loads
    no pathlib."""
    policy_path_str: str | None
    state_dir_str: str

    def _path(self, name: str, value: str | None) -> Path | None:
        """``value`` as a Path, made once: pathlib loads only in a process that asks."""
        made = self.__dict__.get(name)
        if made is None and value is not None:
            from pathlib import Path

            made = Path(value)
            self.__dict__[name] = made
        return made

    @property
    def root(self) -> Path:
        return self._path("_root", self.root_str)  # type: ignore[return-value]

    @property
    def policy_path(self) -> Path | None:
        return self._path("_policy_path", self.policy_path_str)

    @property
    def state_dir(self) -> Path:
        return self._path("_state_dir", self.state_dir_str)  # type: ignore[return-value]

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
        # The strings, not the Paths: equal exactly when the Paths are (both normalised),
        # and comparing them loads no pathlib.
        return (self.root_str, self.policy, self.policy_path_str, self.state_dir_str, self.paths)

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
        root_path = os.path.realpath(root if root is not None else os.getcwd())
        if not os.path.isdir(root_path):
            raise WorkspaceError(f"workspace {root_path} is not a directory; pass --workspace DIR")
        if policy_path is None and os.path.isfile(os.path.join(root_path, POLICY_FILE_IN_WORKSPACE)):
            policy_path = os.path.join(root_path, POLICY_FILE_IN_WORKSPACE)
        resolved_policy = os.path.realpath(policy_path) if policy_path is not None else None
        policy = _policy(resolved_policy, plain_defaults)
        chosen = state_dir or os.environ.get("CODESPACE_STATE_DIR") or policy.store.state_dir
        state = os.path.realpath(os.path.expanduser(chosen)) if chosen else _default_state_dir_str(root_path)
        if _inside(root_path, state):
            raise WorkspaceError(
                f"state directory {state} contains the workspace {root_path}; choose a directory outside it "
                "(--state-dir, CODESPACE_STATE_DIR or store.state_dir in the policy)"
            )
        extra = _hidden_rules(root_path, state, policy, resolved_policy)
        rules = PathRules.build(policy.filesystem, root_path, os.path.expanduser("~"), extra)
        if rules.access(state) != "none":  # pragma: no cover - the rule above guarantees it
            raise WorkspaceError(f"state directory {state} would be reachable by the agent")
        _refuse_below_agent_writable(root_path, state, rules, "state directory",
                                     "--state-dir, CODESPACE_STATE_DIR or store.state_dir in the policy")
        if policy.runtime.daemon_dir:
            _refuse_below_agent_writable(root_path, os.path.realpath(policy.runtime.daemon_dir), rules,
                                         "worker directory", "runtime.daemon_dir in the policy")
        return cls(root=root_path, policy=policy, policy_path=resolved_policy, state_dir=state, paths=rules)

    @property
    def commands(self) -> CommandRules:
        made = self.__dict__.get("commands")
        if made is None:
            from .policy.commands import CommandRules

            made = self.__dict__["commands"] = CommandRules(self.policy.commands)
        return made

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
        os.makedirs(self.state_dir_str, mode=0o700, exist_ok=True)
        os.chmod(self.state_dir_str, 0o700)
        return self.state_dir


def _policy(resolved_policy: str | None, plain_defaults: bool) -> Policy:
    if resolved_policy is None and plain_defaults:
        return PlainDefaults()  # type: ignore[return-value] - read as a Policy
    from .policy.model import PolicyError, load_policy

    try:
        if resolved_policy is None:
            return load_policy(None)
        from pathlib import Path  # with a policy file: pydantic and tomllib load too

        return load_policy(Path(resolved_policy))
    except PolicyError as exc:
        raise WorkspaceError(str(exc)) from exc


def _refuse_below_agent_writable(root: str, path: str, rules: PathRules, what: str, where: str) -> None:
    """The server's own directory must not be below the workspace or any path the agent may
    write: its rule hides it by path, and a command that renames a parent directory moves it
    out from under that rule (found by testing: a sandboxed ``mv`` of the state directory's
    parent let the file tools rewrite the operation store)."""
    for parent in [root, *rules.writable_roots()]:
        if path != parent and _inside(path, parent):
            raise WorkspaceError(
                f"{what} {path} is inside {parent}, which the agent can "
                f"{'change (the workspace)' if parent == root else 'write (filesystem.paths)'}: a command that "
                f"renames a directory above it would move it out of its protection. Choose a directory outside "
                f"the workspace and every writable path ({where})."
            )


def _hidden_rules(root: str, state: str, policy: Policy, resolved_policy: str | None) -> list[PathRule]:
    """The paths the core hides from (or keeps read-only for) every agent, whatever the policy."""
    extra = [PathRule(split_parts(state), "none", "CodeSpace state directory")]
    # Other workspaces' stores and tokens: hidden from every workspace, whoever serves it.
    extra += [PathRule(split_parts(r), "none", "CodeSpace state root") for r in _state_roots_str()
              if not _inside(root, r)]
    if policy.runtime.daemon_dir:
        daemon_dir = os.path.realpath(policy.runtime.daemon_dir)
        extra.append(PathRule(split_parts(daemon_dir), "none", "CodeSpace worker directory (runtime.daemon_dir)"))
    if resolved_policy is not None:
        extra.append(PathRule(split_parts(resolved_policy), "read", "CodeSpace policy file"))
    gitdir = _gitdir_of(root)
    if gitdir is not None:
        extra.append(PathRule(split_parts(gitdir), "read", "filesystem.protected (gitdir of .git)"))
    return extra

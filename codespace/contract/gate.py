"""The core's decisions, for a helper process that runs without a server to ask.

``codespace-apply-patch`` is upstream's command-line ``apply_patch`` under the workspace
policy: an agent's command runs it inside the sandbox, the conformance run compares it
with the released binary. No gateway stands in front of it, so it asks this module what
the gateway would decide, and implements the answer: the same workspace (root, policy
file, state directory, hidden paths), the same rules in the same order, the same
messages (the gateway calls the same functions). The helper decides nothing itself.

Answers come back as :class:`Refused` (or None); the helper shows ``message`` and exits 1.

Start-up time is most of what a one-shot helper costs, so the core's heavier parts
load only when an answer needs them: pydantic and the TOML parser for a policy file
(the defaults are plain values), the plugin machinery for the file-system backend.
Nor does this module load ``typing``, ``collections.abc``, ``pathlib`` or ``importlib``
(the patch plugin's ``-X importtime`` test of the helper's road holds it to that): each
cost the patch helper about as much as its patch.
"""

from __future__ import annotations

import os

from ..policy.paths import normalize, validate_agent_path
from ..workspace import Workspace, WorkspaceError
from .errors import Refused
from .records import Fields, field

TYPE_CHECKING = False  # not typing's: see above
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from ..policy.paths import PathRules
    from .backends import Backends
    from .files import FileSystem
    from .sync_bytes import SyncFileBytes
    from .workspace import WorkspaceView

__all__ = [
    "InstalledPlugin",
    "Target",
    "WorkspaceError",
    "backends",
    "blocking_bytes",
    "filesystem",
    "normalize",
    "open_workspace",
    "patch_size_refusal",
    "patch_targets_refusal",
    "path_syntax_refusal",
    "paths_refusal",
    "split_patch_targets",
]


class Target(Fields):
    """A path a patch touches, as :meth:`Patcher.plan` lists it. The functions below take
    these or the contract's ``PatchTarget`` models alike: a helper need not build a model
    to be told what it may write. A tuple ``(path, action, role)`` with named fields, as the
    ``NamedTuple`` it was (``NamedTuple`` needs typing)."""

    __slots__ = ()
    _fields = ("path", "action", "role")

    def __new__(cls, path: str, action: str, role: str = "target") -> Target:
        return tuple.__new__(cls, (path, action, role))

    path = field(0, "Absolute, lexically normalised.")
    action = field(1, "``add``, ``update``, ``delete`` or ``move``.")
    role = field(2, "``target``, ``move_source`` or ``move_destination``.")


def open_workspace(
    root: str | os.PathLike[str], *, policy_path: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> WorkspaceView:
    """The workspace at ``root`` as a server started there would serve it: its policy file
    (``policy_path``, else ``.codespace/policy.toml``), ``state_dir``, else
    ``CODESPACE_STATE_DIR`` or the default state directory, and the paths the core hides.
    Raises :class:`WorkspaceError` when it cannot be served; the message says how to fix
    it. Without a policy file the defaults are plain values: no pydantic model is loaded
    for them."""
    return Workspace.open(root, policy_path=policy_path, state_dir=state_dir, plain_defaults=True)


def patch_size_refusal(workspace: WorkspaceView, size: int) -> Refused | None:
    """A patch of ``size`` bytes (UTF-8) against ``limits.max_argument_bytes``: the limit the
    gateway applies to a call's arguments, said of the patch a helper was given."""
    limit = workspace.limits.max_argument_bytes
    if size <= limit:
        return None
    return Refused(
        "limits.max_argument_bytes",
        f"refused by policy: the patch is {size} bytes and limits.max_argument_bytes is {limit}. "
        "To proceed: split it into smaller patches.",
    )


def path_syntax_refusal(path: str) -> Refused | None:
    """A path no file can have (empty, a NUL byte, too long...), before any rule applies."""
    problem = validate_agent_path(path)
    if problem is None:
        return None
    return Refused(
        "path syntax", f"refused: {problem} (rule: path syntax; path {path!r}). To proceed: pass a valid path."
    )


def paths_refusal(
    rules: PathRules, *, read: Iterable[str] = (), write: Iterable[str] = (), write_through: Iterable[str] = ()
) -> Refused | None:
    """The first refusal among a call's paths, in the gateway's order: reads, then writes
    (a final link is replaced or removed, not followed), then writes through a final link
    (judged where the link leads). Each directory is resolved once per call."""
    resolved: dict[str, str] = {}
    for path in read:
        refusal = rules.check(path, "read", resolved=resolved)
        if refusal is not None:
            return refusal
    for path in write:
        refusal = rules.check(path, "write", resolved=resolved)
        if refusal is not None:
            return refusal
    for path in write_through:
        refusal = rules.check(path, "write", follow_leaf=True, resolved=resolved)
        if refusal is not None:
            return refusal
    return None


def split_patch_targets(targets: Iterable[Target]) -> tuple[list[str], list[str]]:
    """(paths written, paths written through) of a patch's targets, one entry per target.
    Adds, updates and move destinations write through a linked file, as upstream does:
    they are judged where the link leads. Deletes and move sources remove the link
    itself, and so does every other target at a path the patch removes."""
    targets = list(targets)
    removed = {t.path for t in targets if t.action == "delete" or t.role == "move_source"}
    return [t.path for t in targets if t.path in removed], [t.path for t in targets if t.path not in removed]


def patch_targets_refusal(workspace: WorkspaceView, targets: Iterable[Target]) -> Refused | None:
    """May a patch with these targets be applied in ``workspace``? None, or the gateway's
    refusal for the same patch (path syntax first, then the path rules)."""
    removes, writes = split_patch_targets(targets)
    for path in (*removes, *writes):
        refusal = path_syntax_refusal(path)
        if refusal is not None:
            return refusal
    return paths_refusal(workspace.paths, write=removes, write_through=writes)


class InstalledPlugin(Fields):
    """A ``codespace.plugins`` entry point, as the process that started a helper found it
    (``value``: ``module`` or ``module:attribute``). Handing these over spares the helper
    a scan of the installed distributions (importlib.metadata). A tuple ``(name, value)``
    with named fields, as :class:`Target` is."""

    __slots__ = ()
    _fields = ("name", "value")

    def __new__(cls, name: str, value: str) -> InstalledPlugin:
        return tuple.__new__(cls, (name, value))

    name = field(0)
    value = field(1)

    @property
    def dist(self) -> None:
        return None

    def load(self) -> object:
        from .installed import load_value

        return load_value(self.value)


def _plugins_for(workspace: WorkspaceView, installed: Iterable[tuple[str, str]] | None) -> tuple[Any, list[str]]:
    """The plugins a server would load for ``workspace`` (its allow and block lists, the same
    order), and ``name: error`` for each that failed to load."""
    from ..plugins import Plugins

    policy = workspace.policy.plugins
    discovered = None if installed is None else [InstalledPlugin(name, value) for name, value in installed]
    plugins = Plugins.load(allow=policy.allow, block=policy.block, builtins=(), discovered=discovered)
    return plugins, [f"{i.name}: {i.error}" for i in plugins.listing() if i.status == "failed"]


def filesystem(
    workspace: WorkspaceView, installed: Iterable[tuple[str, str]] | None = None
) -> tuple[FileSystem | None, list[str]]:
    """The file-system backend a server would use for ``workspace`` (the same plugins, the
    same allow and block lists, the same order), or None; and ``name: error`` for each
    plugin that failed to load. ``installed``: the plugins' (name, entry point value)
    pairs when the caller knows them; None reads them from the installed distributions
    (:mod:`.installed`, without importlib.metadata where it can). The choice is then made
    without the plugin manager where it can be (:mod:`.helper_plugins`)."""
    if installed is None:
        from .installed import entry_points

        installed = entry_points()
    if installed is not None:
        from .helper_plugins import NOT_PLAIN, plain_filesystem

        installed = list(installed)
        policy = workspace.policy.plugins
        entries = [InstalledPlugin(name, value) for name, value in installed]
        fs = plain_filesystem(workspace, entries, allow=policy.allow, block=policy.block)
        if fs is not NOT_PLAIN:
            return fs, []  # type: ignore[return-value]
    plugins, failed = _plugins_for(workspace, installed)
    fs, _ = plugins.filesystem(workspace)
    return fs, failed


# The methods of contract.SyncFileBytes: the helper tests for them without loading the
# protocol (a typing.Protocol; a test holds the two lists equal).
BLOCKING_BYTE_METHODS = ("read_bytes_sync", "write_bytes_sync", "kind_sync", "delete_file_sync")


def blocking_bytes(fs: object) -> SyncFileBytes | None:
    """``fs`` when it has the blocking byte methods (``isinstance(fs, contract.SyncFileBytes)``,
    which is what this answers, without loading typing), else None."""
    if all(getattr(fs, name, None) is not None for name in BLOCKING_BYTE_METHODS):
        return fs  # type: ignore[return-value]
    return None


def backends(
    workspace: WorkspaceView, installed: Iterable[tuple[str, str]] | None = None
) -> tuple[Backends, list[str]]:
    """The backends a server would use for ``workspace``, built in this process by the same
    plugins as :func:`filesystem`; and ``name: error`` for each plugin that failed to load.
    For a worker process that performs the server's side effects: with ``[runtime] worker``
    set, the runner plugin is asked too, and must answer None there (the worker's entry
    point tells it that it is the worker)."""
    from ..backends import Backends as CoreBackends

    plugins, failed = _plugins_for(workspace, installed)
    return CoreBackends(plugins, workspace), failed  # type: ignore[arg-type]


def command_refusal(workspace: WorkspaceView, command: list[str] | str) -> Refused | None:
    """The policy's ``[commands]`` rules on an ``exec`` command (an argv list, or a shell
    string), as the gateway applies them."""
    commands = workspace.commands  # type: ignore[attr-defined] - the core's Workspace
    if isinstance(command, list):
        return commands.check_argv(command)
    return commands.check_shell(command)

"""What the default policy is made of, without pydantic: the default path entries and
protected names, and the merging of path entries.

The models in ``model.py`` build their defaults from these, and so does
:mod:`.plain` (the defaults as plain values, for a process that must start fast):
each is written once.
"""

from __future__ import annotations

from .credentials import CREDENTIAL_PATHS

TYPE_CHECKING = False  # not typing's: the patch helper reads these defaults, and typing costs it more
if TYPE_CHECKING:
    from typing import Any, Literal

    Access = Literal["read", "write", "none"]


def __getattr__(name: str) -> object:
    # ``Access`` is a run-time value only for the pydantic models (model.py), which load typing anyway.
    if name == "Access":
        from typing import Literal

        globals()["Access"] = value = Literal["read", "write", "none"]
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

MiB = 1024 * 1024

# Names protected at any depth inside a writable root: writing them changes what
# runs later (git hooks and config) or what governs the agent (CodeSpace, Codex and
# agent configuration).
DEFAULT_PROTECTED_NAMES = (".git", ".codespace", ".codex", ".agents")
# Anchored at each writable root (leading "/"): shell start-up files and credential
# stores that matter only where a home directory or project root would hold them.
DEFAULT_PROTECTED_ANCHORED = (
    "/.bashrc", "/.bash_profile", "/.bash_login", "/.bash_logout", "/.profile",
    "/.zshrc", "/.zshenv", "/.zprofile", "/.zlogin", "/.envrc", "/.inputrc",
    "/.aws", "/.ssh", "/.gnupg", "/.netrc", "/.npmrc", "/.pypirc",
)

DEFAULT_PATHS: dict[str, Access] = {
    "/": "read",
    ".": "write",
    # The server's own environment and devices: /proc/<pid>/environ would hand the
    # agent every secret the server was started with.
    "/proc": "none",
    "/sys": "none",
    "/dev": "none",
    # Credential stores of commonly used tools (listed in the README's policy section).
    **{path: "none" for path in CREDENTIAL_PATHS},
}


def merged_paths(filesystem: Any) -> dict[str, Access]:
    """A ``[filesystem]`` section's path entries over DEFAULT_PATHS (``home = "hidden"``
    adds ``~`` = none and the ``home_readable`` entries first)."""
    merged: dict[str, Access] = dict(DEFAULT_PATHS)
    if filesystem.home == "hidden":
        merged["~"] = "none"
        merged.update({entry: "read" for entry in filesystem.home_readable if entry not in DEFAULT_PATHS})
    return {**merged, **filesystem.paths}


def all_protected(filesystem: Any) -> list[str]:
    return [*filesystem.protected, *filesystem.extra_protected]

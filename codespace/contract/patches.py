"""apply_patch: the models the MCP tool and the Patcher backend share."""

from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from ..models import Strict
from .files import FileSystem

PatchAction = Literal["add", "update", "delete", "move"]
PatchMode = Literal["atomic", "upstream"]


class PatchTarget(Strict):
    """A path a patch will touch, for the gateway's policy check."""

    path: str = Field(description="Absolute, lexically normalised.")
    action: PatchAction
    role: Literal["target", "move_source", "move_destination"] = "target"


class PatchPlan(Strict):
    targets: list[PatchTarget]


class PatchRequest(Strict):
    patch: str = Field(description="The patch text, '*** Begin Patch' ... '*** End Patch' (V4A).")
    mode: PatchMode = Field(
        default="atomic",
        description="'atomic': nothing changes unless every file succeeds (crash-safe); "
        "'upstream': Codex 0.171.0 behaviour, sections applied in order and earlier ones kept on failure.",
    )
    dry_run: bool = Field(default=False, description="Compute and return the diff without writing.")
    cwd: str = Field(default="", description="Set by the host: absolute directory relative patch paths resolve against.")


class ChangedFile(Strict):
    path: str = Field(description="Absolute path changed.")
    action: PatchAction
    move_from: str | None = None
    diff: str = Field(description="Unified diff of this file's change.")


class PatchResult(Strict):
    summary: str = Field(description="Upstream's success output ('Success. Updated the following files:' ...).")
    files: list[ChangedFile]
    applied: bool = Field(description="False for a dry run.")


@runtime_checkable
class Patcher(Protocol):
    """The patch backend (plugins/patch implements it)."""

    def plan(self, patch: str, cwd: str) -> PatchPlan:
        """Parse ``patch`` and list the paths it touches; raise ToolError with the
        upstream message when it does not parse."""

    async def apply(self, request: PatchRequest, fs: FileSystem, journal_dir: Path) -> PatchResult:
        """Apply a parsed-and-checked patch through ``fs``. ``journal_dir`` (in the
        state directory) holds what atomic mode needs to recover after a crash."""

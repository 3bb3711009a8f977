"""The runner contract: what the host asks of plugin backends, in CodeSpace's own types.

No plugin type crosses this line: a plugin converts these models to whatever its
mechanism needs.
"""

from .commands import CommandSpec, Terminal, TerminalProcess
from .errors import BackendMissing, FsError, Refused, ToolError
from .files import (
    DirEntry,
    EntryError,
    FileKind,
    FileSystem,
    InvalidUtf8,
    ListDirRequest,
    ListDirResult,
    MakeDirRequest,
    MakeDirResult,
    MoveRequest,
    MoveResult,
    ReadFileRequest,
    ReadFileResult,
    RemoveRequest,
    RemoveResult,
    StatRequest,
    StatResult,
    WalkEntry,
    WalkRequest,
    WalkResult,
    WriteFileRequest,
    WriteFileResult,
)
from .patches import (
    ChangedFile,
    Patcher,
    PatchPlan,
    PatchRequest,
    PatchResult,
    PatchTarget,
)
from .sandbox import LaunchedProcess, Sandbox, SandboxInfo, SandboxLayout

__all__ = [
    "BackendMissing",
    "ChangedFile",
    "CommandSpec",
    "DirEntry",
    "EntryError",
    "FileKind",
    "FileSystem",
    "FsError",
    "InvalidUtf8",
    "LaunchedProcess",
    "ListDirRequest",
    "ListDirResult",
    "MakeDirRequest",
    "MakeDirResult",
    "MoveRequest",
    "MoveResult",
    "PatchPlan",
    "PatchRequest",
    "PatchResult",
    "PatchTarget",
    "Patcher",
    "ReadFileRequest",
    "Refused",
    "ReadFileResult",
    "RemoveRequest",
    "RemoveResult",
    "Sandbox",
    "SandboxInfo",
    "SandboxLayout",
    "StatRequest",
    "StatResult",
    "Terminal",
    "TerminalProcess",
    "ToolError",
    "WalkEntry",
    "WalkRequest",
    "WalkResult",
    "WriteFileRequest",
    "WriteFileResult",
]

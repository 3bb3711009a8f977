"""codespace-patch: V4A patches exactly as Codex 0.171.0 applies them, plus an
all-or-nothing (atomic) mode with crash recovery.

The parser and the text rewriting are pure and importable on their own; the
Patcher backend (:mod:`codespace_patch.backend`) and the helper executable
(:mod:`codespace_patch.cli`) load the host's modules when used.
"""

from .applying import Rewrite, rewrite
from .errors import ApplyError, ParseError, PatchError
from .parser import AddFile, Chunk, DeleteFile, Patch, UpdateFile, parse_patch

__version__ = "0.2.0"
UPSTREAM_RELEASE = "rust-v0.171.0"

__all__ = [
    "AddFile",
    "ApplyError",
    "Chunk",
    "DeleteFile",
    "ParseError",
    "Patch",
    "PatchError",
    "Rewrite",
    "UPSTREAM_RELEASE",
    "UpdateFile",
    "__version__",
    "parse_patch",
    "rewrite",
]

"""codespace-fs: the CodeSpace file-system backend (confined, no-follow file I/O and
bounded walks), following OpenAI Codex ``rust-v0.171.0``'s file-system components."""

from .backend import FsBackend

__version__ = "0.1.0"
__all__ = ["FsBackend", "__version__"]

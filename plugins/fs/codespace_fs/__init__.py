"""codespace-fs: the CodeSpace file-system backend (confined, no-follow file I/O and
bounded walks), following OpenAI Codex ``rust-v0.171.0``'s file-system components.

The backend's modules load on first use, not when the server loads its plugins.
"""

__version__ = "0.2.5"
__all__ = ["FsBackend", "__version__"]


def __getattr__(name: str) -> object:  # not typing.Any: typing costs the patch helper more than its patch
    if name == "FsBackend":
        from .backend import FsBackend

        return FsBackend
    raise AttributeError(name)

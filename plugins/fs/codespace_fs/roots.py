"""The directory a path is confined beneath, and the open flags every lookup uses.

Kept apart from :mod:`.resolve` so that both ways of resolving (``openat2`` there,
the component walk in :mod:`.openat_walk`) stand on it without importing each other.
"""

from __future__ import annotations

import os

O_CLOEXEC = os.O_CLOEXEC
O_PATH = os.O_PATH
O_DIR = os.O_DIRECTORY
O_NOFOLLOW = os.O_NOFOLLOW


# Tuples with named fields rather than dataclasses, here and for resolve.Opened: a dataclass
# compiles its methods when the module loads (1-2 ms each), and typing.NamedTuple needs typing
# (several ms), both paid by the one-shot patch helper at start. Each is what its NamedTuple
# was: a tuple (equal to a plain tuple of its values, unpacked, hashed) with named fields.
class Root(tuple):
    """The directory a path is confined to: the workspace root, or the deepest
    policy entry granting access to a path outside it."""

    __slots__ = ()
    _fields = ("path", "fd", "owned")

    def __new__(cls, path: str, fd: int, owned: bool) -> Root:
        return tuple.__new__(cls, (path, fd, owned))

    def __getnewargs__(self) -> tuple[str, int, bool]:
        return tuple(self)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Root(path={self[0]!r}, fd={self[1]!r}, owned={self[2]!r})"

    path: str = property(lambda self: self[0])  # type: ignore[assignment]
    fd: int = property(lambda self: self[1])  # type: ignore[assignment]
    owned: bool = property(lambda self: self[2])  # type: ignore[assignment]

    @property
    def is_fs_root(self) -> bool:
        return self.path == "/"

    def rel(self, path: str) -> str:
        if self.path == "/":
            return path[1:]
        return path[len(self.path) + 1:]

    def join(self, rel: str) -> str:
        if not rel:
            return self.path
        return ("/" if self.path == "/" else self.path + "/") + rel

    def close(self) -> None:
        if self.owned:
            os.close(self.fd)

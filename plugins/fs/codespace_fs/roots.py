"""The directory a path is confined beneath, and the open flags every lookup uses.

Kept apart from :mod:`.resolve` so that both ways of resolving (``openat2`` there,
the component walk in :mod:`.openat_walk`) stand on it without importing each other.
"""

from __future__ import annotations

import os

from codespace.contract.records import Fields, field

O_CLOEXEC = os.O_CLOEXEC
O_PATH = os.O_PATH
O_DIR = os.O_DIRECTORY
O_NOFOLLOW = os.O_NOFOLLOW


# A tuple with named fields (codespace.contract.records: no dataclass or typing cost for the
# one-shot patch helper), here and for resolve.Opened, as the NamedTuples they were.
class Root(Fields):
    """The directory a path is confined to: the workspace root, or the deepest
    policy entry granting access to a path outside it."""

    __slots__ = ()
    _fields = ("path", "fd", "owned")

    def __new__(cls, path: str, fd: int, owned: bool) -> Root:
        return tuple.__new__(cls, (path, fd, owned))

    path: str = field(0)  # type: ignore[assignment]
    fd: int = field(1)  # type: ignore[assignment]
    owned: bool = field(2)  # type: ignore[assignment]

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

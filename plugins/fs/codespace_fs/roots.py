"""The directory a path is confined beneath, and the open flags every lookup uses.

Kept apart from :mod:`.resolve` so that both ways of resolving (``openat2`` there,
the component walk in :mod:`.openat_walk`) stand on it without importing each other.
"""

from __future__ import annotations

import os
from typing import NamedTuple

O_CLOEXEC = os.O_CLOEXEC
O_PATH = os.O_PATH
O_DIR = os.O_DIRECTORY
O_NOFOLLOW = os.O_NOFOLLOW


# NamedTuples rather than dataclasses, here and for resolve.Opened: a dataclass compiles its
# methods when the module loads (1-2 ms each), which the one-shot patch helper pays at start.
class Root(NamedTuple):
    """The directory a path is confined to: the workspace root, or the deepest
    policy entry granting access to a path outside it."""

    path: str
    fd: int
    owned: bool

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

"""The registry of running command sessions (filled in by the exec issue)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backends import Backends
    from ..store import OperationStore
    from ..workspace import Workspace


class ProcessRegistry:
    def __init__(self, workspace: Workspace, backends: Backends, store: OperationStore) -> None:
        self.workspace = workspace
        self.backends = backends
        self.store = store

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ProcessRegistry]:
        yield self

"""The server's side of the runner: the contract's FileSystem and Patcher, performed by the worker.

Requests go as their models' JSON, results come back as JSON and are validated into the same
result models; a backend error comes back as the same exception (``errors_wire``). So what the
gateway makes of a call (result, text, error, record) is what it makes of it in-process.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from codespace.contract import (
    FileKind, ListDirResult, MakeDirResult, MoveResult, PatchPlan, PatchRequest, PatchResult,
    ReadFileResult, RemoveResult, StatResult, WalkResult, WriteFileResult,
)

from .lifecycle import Worker
from .worker_calls import call_worker


class RemoteBackends:
    """What ``codespace_runner`` returns: files and patches through the worker, the rest local."""

    def __init__(self, worker: Worker, local: Any) -> None:
        self.worker = worker
        self.local = local
        self._fs = RemoteFileSystem(worker)
        self._patcher: RemotePatcher | None = None
        self._sessions: Any = None

    def filesystem(self) -> RemoteFileSystem:
        return self._fs

    def patcher(self) -> RemotePatcher:
        if self._patcher is None:
            # Parsing a patch to list its targets is the gateway's pre-check, done here; the worker
            # parses it again and judges the targets itself.
            self._patcher = RemotePatcher(self.worker, self.local.patcher())
        return self._patcher

    def terminal(self) -> Any:
        return self.local.terminal()

    def sessions(self, records: Any) -> Any:
        """Command sessions in the worker; ``records`` (the core's store side) gets their starts
        and ends."""
        if self._sessions is None:
            from .remote_sessions import RemoteSessions

            self._sessions = RemoteSessions(self.worker, records)
        return self._sessions

    def sandbox(self) -> Any:
        return self.local.sandbox()

    def sandbox_decision(self) -> Any:
        return self.local.sandbox_decision()

    def status(self) -> dict[str, Any]:
        return self.worker.status()

    async def run_tool(self, name: str, params: dict, operation_id: str | None) -> dict:
        """A tool that acts on the workspace itself, run by the worker (``tool.run``)."""
        return await call_worker(self.worker, "tool.run", {"name": name, "args": params,
                                                           "operation_id": operation_id}, name)


class RemoteFileSystem:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def _model(self, method: str, request: Any, result: type) -> Any:
        data = await call_worker(self.worker, method, request.model_dump(mode="json"), method.removeprefix("fs."))
        return result.model_validate(data)

    async def read_file(self, request: Any) -> ReadFileResult:
        return await self._model("fs.read_file", request, ReadFileResult)

    async def write_file(self, request: Any) -> WriteFileResult:
        return await self._model("fs.write_file", request, WriteFileResult)

    async def list_dir(self, request: Any) -> ListDirResult:
        return await self._model("fs.list_dir", request, ListDirResult)

    async def walk(self, request: Any) -> WalkResult:
        return await self._model("fs.walk", request, WalkResult)

    async def stat(self, request: Any) -> StatResult:
        return await self._model("fs.stat", request, StatResult)

    async def make_dir(self, request: Any) -> MakeDirResult:
        return await self._model("fs.make_dir", request, MakeDirResult)

    async def move(self, request: Any) -> MoveResult:
        return await self._model("fs.move", request, MoveResult)

    async def remove(self, request: Any) -> RemoveResult:
        return await self._model("fs.remove", request, RemoveResult)

    async def read_bytes(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        data = await call_worker(self.worker, "fs.read_bytes",
                           {"path": path, "max_bytes": max_bytes, "follow_symlink": follow_symlink}, "read_bytes")
        return base64.b64decode(data["data"])

    async def write_bytes(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        await call_worker(self.worker, "fs.write_bytes", {
            "path": path, "data": base64.b64encode(data).decode("ascii"), "create_parents": create_parents,
            "follow_symlink": follow_symlink, "durable": durable, "in_place": in_place,
        }, "write_bytes")

    async def sync(self) -> None:
        await call_worker(self.worker, "fs.sync", {}, "sync")

    async def delete_file(self, path: str) -> None:
        await call_worker(self.worker, "fs.delete_file", {"path": path}, "delete_file")

    async def kind(self, path: str) -> FileKind | None:
        return (await call_worker(self.worker, "fs.kind", {"path": path}, "kind"))["kind"]


class RemotePatcher:
    def __init__(self, worker: Worker, local: Any) -> None:
        self.worker = worker
        self.local = local

    def plan(self, patch: str, cwd: str) -> PatchPlan:
        return self.local.plan(patch, cwd)

    async def apply(self, request: PatchRequest, fs: Any, journal_dir: Path) -> PatchResult:
        # The worker applies through its own FileSystem and journals in its own state directory
        # (the same directory: it opened the workspace the server did).
        data = await call_worker(self.worker, "patch.apply", request.model_dump(mode="json"), "apply_patch")
        return PatchResult.model_validate(data)

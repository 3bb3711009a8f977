"""The FileSystem backend: the contract's async methods over the blocking mechanisms.

Where the work runs. A hop to a worker thread costs more than a small read or a
stat does (see benchmarks/README-fs.md), so small, bounded work runs inline on the
event loop: stat, kind, make_dir, a non-recursive remove, reads of files up to
``INLINE_READ_BYTES``, byte reads up to ``INLINE_COPY_BYTES`` that the page cache
holds whole (asked with ``RWF_NOWAIT``, so a cold file never stalls the loop),
unflushed writes up to ``INLINE_COPY_BYTES`` and listings of small directories.
Work that can be long runs on a worker thread: walks and recursive removals
through :func:`codespace.contract.run_cancellable` (a cancelled call stops the walk
between directories instead of running on unseen), writes that fsync, moves,
other reads and big listings.

The raw byte methods also exist as blocking calls (:class:`codespace.contract.SyncFileBytes`),
for a one-shot process with no event loop (the patch helper): the same mechanisms, run in
the caller's thread. anyio and the core's thread helper are loaded by the first method that
hops to a thread, so such a process never loads them.
"""

from __future__ import annotations

import os

from . import reading, writing
from .resolve import Confinement

# The models only type the methods: a process that reads and writes bytes (the patch
# helper) loads no pydantic for them.
#
# Closures rather than functools.partial below, this TYPE_CHECKING rather than typing's, and the
# listing, directory, move and removal modules imported by the methods that use them: the patch
# helper rewrites files through this backend, and functools, typing and those modules (a quarter
# millisecond each) cost it more than its patch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .resolve import Mode
    from codespace.contract import (
        FileKind,
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
        WalkRequest,
        WalkResult,
        WorkspaceView,
        WriteFileRequest,
        WriteFileResult,
    )

INLINE_READ_BYTES = 256 * 1024
# A memory copy of 2 MiB takes ~0.1 ms here, a worker-thread hop ~0.3 ms (measured).
INLINE_COPY_BYTES = 2 * 1024 * 1024
INLINE_DIR_BYTES = 32 * 1024  # a directory's st_size; roughly 500-1000 entries on ext4


class FsBackend:
    """Confined, no-follow file I/O for one workspace."""

    def __init__(self, workspace: WorkspaceView, mode: Mode) -> None:
        self.workspace = workspace
        self.limits = workspace.limits
        self.conf = Confinement(workspace, mode)

    @property
    def mode(self) -> Mode:
        return self.conf.mode

    # -- reads ---------------------------------------------------------------------

    async def read_file(self, request: ReadFileRequest) -> ReadFileResult:
        limits = self.limits
        fd, st, _ = reading.open_regular(self.conf, request.path, need="read", follow=True, action="read")
        max_file, max_read = limits.max_file_bytes, limits.max_read_bytes

        def run() -> ReadFileResult:
            return reading.read_file_from(fd, st, request, max_file_bytes=max_file, default_max_bytes=max_read)

        if st.st_size <= INLINE_READ_BYTES:
            return run()
        return await _in_thread(run, fd)

    def read_bytes_sync(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        return reading.read_bytes(self.conf, path, max_bytes=max_bytes, follow_symlink=follow_symlink)

    async def read_bytes(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        fd, st, _ = reading.open_regular(self.conf, path, need="read", follow=follow_symlink, action="read")

        def run() -> bytes:
            return reading.read_bytes_from(fd, st, path, max_bytes)

        if st.st_size <= INLINE_READ_BYTES:
            return run()
        if st.st_size <= min(INLINE_COPY_BYTES, max_bytes):
            data = reading.read_cached(fd, st.st_size)
            if data is not None:
                os.close(fd)
                return data
        return await _in_thread(run, fd)

    async def list_dir(self, request: ListDirRequest) -> ListDirResult:
        from . import listing

        fd, st = listing.open_dir(self.conf, request.path)
        max_entries = self.limits.walk_max_entries
        refuse = self.conf.refuse_hardlinks

        def run() -> ListDirResult:
            return listing.list_dir_from(fd, request, max_entries=max_entries, refuse_hardlinks=refuse)

        if st.st_size <= INLINE_DIR_BYTES:
            return run()
        return await _in_thread(run, fd)

    async def walk(self, request: WalkRequest) -> WalkResult:
        from . import walking  # and its gitignore matcher (pathspec): loaded by the first walk

        from codespace.contract import run_cancellable

        return await run_cancellable(lambda cancel: walking.walk(self.conf, request, self.limits, cancel))

    async def stat(self, request: StatRequest) -> StatResult:
        from . import listing

        return listing.stat_path(self.conf, request)

    async def kind(self, path: str) -> FileKind | None:
        from . import listing

        return listing.kind(self.conf, path)  # type: ignore[return-value]

    def kind_sync(self, path: str, *, follow_symlink: bool = False) -> FileKind | None:
        from . import listing

        return listing.kind(self.conf, path, follow=follow_symlink)  # type: ignore[return-value]

    # -- changes -------------------------------------------------------------------

    async def write_file(self, request: WriteFileRequest) -> WriteFileResult:
        conf, max_file = self.conf, self.limits.max_file_bytes
        return await _to_thread(lambda: writing.write_file(conf, request, max_file_bytes=max_file))

    def _writer(
        self, path: str, data: bytes, *, create_parents: bool, follow_symlink: bool, durable: bool, in_place: bool,
    ):  # noqa: ANN202
        conf, max_file = self.conf, self.limits.max_file_bytes
        if in_place:
            return lambda: writing.write_in_place(
                conf, path, data, max_file_bytes=max_file, create_parents=create_parents,
                follow_symlink=follow_symlink, durable=durable,
            )
        return lambda: writing.write_atomic(
            conf, path, data, max_file_bytes=max_file, create_parents=create_parents, follow_symlink=follow_symlink,
            durable=durable, report_previous=False,
        )

    def write_bytes_sync(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        self._writer(path, data, create_parents=create_parents, follow_symlink=follow_symlink, durable=durable,
                     in_place=in_place)()

    async def write_bytes(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        run = self._writer(path, data, create_parents=create_parents, follow_symlink=follow_symlink, durable=durable,
                           in_place=in_place)
        if not durable and len(data) <= INLINE_COPY_BYTES:
            run()  # no fsync to wait for: cheaper than a worker-thread hop
            return
        await _to_thread(run)

    async def sync(self) -> None:
        await _to_thread(writing.pending_sync.flush)

    async def make_dir(self, request: MakeDirRequest) -> MakeDirResult:
        from . import directories

        return directories.make_dir(self.conf, request)

    async def move(self, request: MoveRequest) -> MoveResult:
        from codespace.contract import run_cancellable

        from . import moving

        return await run_cancellable(lambda cancel: moving.move(self.conf, request, cancel))

    async def remove(self, request: RemoveRequest) -> RemoveResult:
        from . import removing

        if not request.recursive:
            return removing.remove(self.conf, request)
        from codespace.contract import run_cancellable

        return await run_cancellable(lambda cancel: removing.remove(self.conf, request, cancel))

    async def delete_file(self, path: str) -> None:
        from . import removing

        removing.delete_file(self.conf, path)

    def delete_file_sync(self, path: str) -> None:
        from . import removing  # here, as moving above: an Update patch (the helper's usual one) needs neither

        removing.delete_file(self.conf, path)


async def _to_thread(run):  # noqa: ANN001, ANN202
    import anyio.to_thread

    return await anyio.to_thread.run_sync(run)


async def _in_thread(run, fd: int):  # noqa: ANN001, ANN202
    """``run()`` (which closes ``fd``) on a worker thread; if the call is cancelled
    before the thread starts, the fd is closed here instead."""
    started = False

    def body():  # noqa: ANN202
        nonlocal started
        started = True
        return run()

    try:
        return await _to_thread(body)
    except BaseException:
        if not started:
            os.close(fd)
        raise

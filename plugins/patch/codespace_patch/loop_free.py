"""Upstream mode with no event loop, for the helper process (``codespace-apply-patch``).

The sections run as everywhere else (:func:`.sections.run_sections` over a
:class:`.stores.DirectStore`), but through a backend's blocking byte methods
(:class:`codespace.contract.SyncFileBytes`): every store call is finished by the time
its coroutine takes its first step, so :func:`drive` runs a whole patch to its end
with ``send(None)``. A one-shot process then never imports asyncio, which alone cost
the helper more than the released binary's whole run on a large patch.
"""

from __future__ import annotations

from .stores import DirectStore

TYPE_CHECKING = False  # not typing's: typing cost this road more than the patch it runs
if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

    from codespace.contract import FileKind, SyncFileBytes


class SuspendedError(RuntimeError):
    """A coroutine on the loop-free road waited for something: a bug in this package."""


def drive(coroutine: Coroutine[Any, Any, Any]) -> Any:  # noqa: ANN401 - the coroutine's own result
    """The result of ``coroutine``, which must complete without suspending (it awaits only
    coroutines that do no awaiting of their own). It is closed, and SuspendedError raised,
    if it suspends: nothing here could resume it."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise SuspendedError(
        "codespace-apply-patch: a step of the loop-free patch road waited for an event loop; "
        "this is a bug in codespace-patch (run the patch through the apply_patch tool meanwhile)"
    )


class _Awaitable:
    """A SyncFileBytes under the async names DirectStore awaits; each call is done at once."""

    def __init__(self, fs: SyncFileBytes) -> None:
        self._fs = fs

    async def read_bytes(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        return self._fs.read_bytes_sync(path, max_bytes=max_bytes, follow_symlink=follow_symlink)

    async def write_bytes(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        self._fs.write_bytes_sync(path, data, create_parents=create_parents, follow_symlink=follow_symlink,
                                  durable=durable, in_place=in_place)

    async def kind(self, path: str) -> FileKind | None:
        return self._fs.kind_sync(path)

    async def delete_file(self, path: str) -> None:
        self._fs.delete_file_sync(path)


class LoopFreeStore(DirectStore):
    """Upstream mode's store over a backend's blocking byte methods."""

    def __init__(self, fs: SyncFileBytes, max_bytes: int) -> None:
        super().__init__(_Awaitable(fs), max_bytes)  # type: ignore[arg-type]
        self._blocking = fs

    async def _leads_to_file(self, path: str) -> bool:
        kind = self._blocking.kind_sync(path, follow_symlink=True)
        return kind is not None and kind != "directory"

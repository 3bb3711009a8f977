"""Optional for a :class:`~codespace.contract.FileSystem`: its raw byte methods as blocking calls.

A one-shot process that moves bytes and exits (the patch helper) pays more for an event
loop than for its work: importing asyncio alone takes several times as long as the
released ``apply_patch`` binary's whole run. A backend that can do these calls without a
loop implements :class:`SyncFileBytes` beside its async methods; such a process tests for
it with ``isinstance`` and, when it is there, never starts a loop. A backend without it (a
remote one, say) is used through its async methods as before: nothing else changes.

This module is apart from :mod:`.files` because that one defines the tools' pydantic
models: the test ``isinstance(fs, SyncFileBytes)`` must not load pydantic.

Stable-additive (versioned with ``codespace.contract``): methods may be added to this
protocol only as a new, separately tested protocol; the ones here keep their meaning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .files import FileKind


@runtime_checkable
class SyncFileBytes(Protocol):
    """The same confinement, errors and effects as the FileSystem methods of the same name
    without ``_sync`` (``read_bytes``, ``write_bytes``, ``kind``, ``delete_file``), done in
    the calling thread before returning. Paths are absolute and lexically normalised, and
    the core has checked them against the policy, as for the async methods. Failures are
    raised as :class:`codespace.contract.FsError`.

    Not for a server's event loop: a call may block on the disk for as long as the
    operation takes. (``sync()``, the FileSystem's flush, has no counterpart here.)
    """

    def read_bytes_sync(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        """As :meth:`FileSystem.read_bytes`."""

    def write_bytes_sync(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        """As :meth:`FileSystem.write_bytes` (``durable=False`` writes are flushed by the
        FileSystem's ``sync()`` or not at all)."""

    def kind_sync(self, path: str, *, follow_symlink: bool = False) -> FileKind | None:
        """As :meth:`FileSystem.kind`; with ``follow_symlink`` the kind of what a final link
        leads to (confined as ``stat(follow_symlinks=True)`` is), None when nothing is there."""

    def delete_file_sync(self, path: str) -> None:
        """As :meth:`FileSystem.delete_file`."""

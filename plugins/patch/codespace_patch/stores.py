"""Where sections run: straight through the FileSystem backend, or on an overlay.

:class:`DirectStore` is upstream mode: every section's effect lands at once, so
a later failure leaves earlier sections applied (upstream scenario 015).

:class:`OverlayStore` is atomic mode's first phase: reads come from the backend,
writes and deletions stay in memory, and the failures upstream would hit (a
directory where a file is expected, a parent that is a file, a missing file) are
reproduced from what the overlay and the disk hold, so both modes fail with the
same message. Nothing is written until every section has succeeded; the result is
a list of changes for :mod:`codespace_patch.journal` to commit.
"""

from __future__ import annotations

import errno
import posixpath

from codespace.contract import FsError, normalize
from codespace.contract.records import Fields, Record, field

TYPE_CHECKING = False  # not typing's: the helper loads this module, and typing costs it more than its patch
if TYPE_CHECKING:
    from codespace.contract import FileSystem

# The request models (pydantic) load where a link or a new directory needs one: the
# helper applies most patches without them.

from .errors import rust_io_error
from .sections import StoreFailure

# Errnos a plain read can produce upstream too; their text is Rust's. Anything
# else is CodeSpace's own refusal (size limit, link escaping the root...), shown as is.
_UPSTREAM_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM}
MAX_LINK_HOPS = 40
_UNDECIDED = "?"


def _read_failure(exc: FsError, path: str) -> StoreFailure:
    if exc.errno == errno.EISDIR:
        reason = f"path `{path}` is not a file"
    elif exc.errno in _UPSTREAM_ERRNOS:
        reason = rust_io_error(exc.errno)
    else:
        reason = exc.message
    return StoreFailure(reason, exc.message, exc.code)


def _failure(detail: str, code: str | None = None, *, parents: bool = False) -> StoreFailure:
    return StoreFailure("", detail, code, parents=parents)


class DirectStore:
    """Upstream mode: each operation goes straight to the backend."""

    def __init__(self, fs: FileSystem, max_bytes: int) -> None:
        self.fs = fs
        self.max_bytes = max_bytes

    async def read(self, path: str) -> bytes:
        try:
            return await self.fs.read_bytes(path, max_bytes=self.max_bytes, follow_symlink=True)
        except FsError as exc:
            raise _read_failure(exc, path) from None

    async def write(self, path: str, data: bytes, *, create_parents: bool) -> None:
        # Upstream rewrites an existing file on its own inode (std::fs::write): so does
        # this mode, which keeps hard links out of it and leaves mode, owner and
        # extended attributes alone, and skips ext4's flush of replaced files.
        try:
            await self.fs.write_bytes(path, data, create_parents=create_parents, follow_symlink=True, durable=False,
                                      in_place=True)
        except FsError as exc:
            raise _failure(exc.message, exc.code,
                           parents=create_parents and await self._parents_were_missing(path)) from None

    async def _parents_were_missing(self, path: str) -> bool:
        """Did ``path``'s directory not exist, below a directory? Upstream makes the missing
        directories only then, and names that step when it fails (found by testing from outside:
        an Add under a directory it may not write said "Failed to write file"); below a file
        there is nothing to make, and the write is what fails."""
        directory = posixpath.dirname(path)
        try:
            if await self.fs.kind(directory) is not None:
                return False
            while directory not in ("/", ""):
                directory = posixpath.dirname(directory)
                kind = await self.fs.kind(directory)
                if kind is not None:
                    return kind in ("directory", "symlink")
        except FsError:
            return False  # cannot tell: the write's own message
        return True

    async def delete(self, path: str) -> None:
        # Upstream removes files, FIFOs and links to files; a directory, a missing
        # path, a dangling link or a link to a directory fails.
        try:
            kind = await self.fs.kind(path)
            if kind is None:
                raise _failure(f"{path} does not exist", "not_found")
            if kind == "directory":
                raise _failure(f"{path} is a directory; a Delete File section removes files only", "is_directory")
            if kind == "symlink" and not await self._leads_to_file(path):
                raise _failure(f"{path} is a link to a directory or to nothing", "not_a_file")
            await self.fs.delete_file(path)
        except FsError as exc:
            raise _failure(exc.message, exc.code) from None

    async def _leads_to_file(self, path: str) -> bool:
        """Does the link at ``path`` lead to something that is not a directory?"""
        from codespace.contract import StatRequest

        target = await self.fs.stat(StatRequest(path=path, follow_symlinks=True))
        return target.exists and not target.is_directory

    async def remove(self, path: str) -> None:
        try:
            await self.fs.delete_file(path)
        except FsError as exc:
            raise _failure(exc.message, exc.code) from None

    async def peek(self, path: str) -> bytes | None:
        try:
            return await self.fs.read_bytes(path, max_bytes=self.max_bytes, follow_symlink=True)
        except FsError:
            return None


class _Entry(Record):
    __slots__ = ("original", "current")
    original: bytes | None  # None: absent before the patch
    current: bytes | None

    def __init__(self, original: bytes | None, current: bytes | None) -> None:
        self.original = original
        self.current = current


class Change(Fields):
    __slots__ = ()
    _fields = ("path", "old", "new")

    def __new__(cls, path: str, old: bytes | None, new: bytes | None) -> Change:
        return tuple.__new__(cls, (path, old, new))

    path: str = field(0)  # type: ignore[assignment]
    old: bytes | None = field(1, "None: the file did not exist")  # type: ignore[assignment]
    new: bytes | None = field(2, "None: the file is deleted")  # type: ignore[assignment]


_ATOMIC_LINK = (
    "atomic mode does not remove symbolic links or special files (a crash could not restore them); "
    "use mode='upstream', or the remove tool"
)


class OverlayStore:
    """Atomic mode: sections run against memory over the backend's current state."""

    def __init__(self, fs: FileSystem, max_bytes: int, root: str = "/") -> None:
        self.fs = fs
        self.max_bytes = max_bytes
        self.root = root  # exists; ancestors are not looked up beyond it
        # Keyed by the path actually written: a final symbolic link is resolved, so
        # a patch touching a link and its target sees one file.
        self.entries: dict[str, _Entry] = {}
        self.new_dirs: list[str] = []
        self.moved_from: set[str] = set()  # the originals of Move sections
        self._new_dir_set: set[str] = set()
        self._disk: dict[str, str | None] = {}

    # -- what is at a path, overlay first -------------------------------------------

    async def _disk_kind(self, path: str) -> str | None:
        if path not in self._disk:
            try:
                kind = await self.fs.kind(path)
            except FsError as exc:
                if exc.errno == errno.ENOTDIR:
                    kind = "notdir"
                elif exc.errno == errno.ENOENT:
                    kind = None
                else:
                    raise _read_failure(exc, path) from None
            self._disk[path] = kind
        return self._disk[path]

    def _overlay_state(self, path: str) -> str | None:
        """What the overlay alone says about ``path``; _UNDECIDED when only the disk knows."""
        if path in self._new_dir_set:
            return "directory"
        entry = self.entries.get(path)
        if entry is not None:
            return "file" if entry.current is not None else None
        parent = posixpath.dirname(path)
        while parent != "/":
            if parent in self._new_dir_set:
                return None  # a directory the patch creates holds only what the patch put there
            above = self.entries.get(parent)
            if above is not None:
                return "notdir" if above.current is not None else None
            parent = posixpath.dirname(parent)
        return _UNDECIDED

    async def _state(self, path: str) -> str | None:
        """'file', 'directory', 'symlink', 'notdir' (a parent is a file), another
        kind, or None (absent), after the overlay's changes."""
        state = self._overlay_state(path)
        return await self._disk_kind(path) if state == _UNDECIDED else state

    async def _follow(self, path: str) -> tuple[str | None, str]:
        """The state and path of what a final link points at (the path itself otherwise)."""
        for _ in range(MAX_LINK_HOPS):
            state = await self._state(path)
            if state != "symlink":
                return state, path
            from codespace.contract import StatRequest

            try:
                link = await self.fs.stat(StatRequest(path=path, follow_symlinks=False))
            except FsError as exc:
                raise _read_failure(exc, path) from None
            if link.target is None:
                return None, path
            path = normalize(link.target, posixpath.dirname(path))
        return "loop", path

    async def _load(self, path: str) -> _Entry:
        entry = self.entries.get(path)
        if entry is None:
            try:
                data = await self.fs.read_bytes(path, max_bytes=self.max_bytes, follow_symlink=True)
            except FsError as exc:
                raise _read_failure(exc, path) from None
            entry = self.entries[path] = _Entry(data, data)
        return entry

    # -- the Store interface ----------------------------------------------------------

    async def read(self, path: str) -> bytes:
        state, real = await self._follow(path)
        if state == "directory":
            raise StoreFailure(f"path `{path}` is not a file", f"{path} is a directory", "is_directory")
        if state == "notdir":
            raise StoreFailure(rust_io_error(errno.ENOTDIR), f"a parent of {path} is a file", "not_a_directory")
        if state == "loop":
            raise StoreFailure(rust_io_error(errno.ELOOP), f"{path}: too many symbolic links", "symlink_refused")
        if state is None:
            if self._overlay_state(real) == _UNDECIDED:
                # Let the backend's own error say why (missing, a parent is a file...).
                return (await self._load(real)).current or b""
            raise StoreFailure(rust_io_error(errno.ENOENT), f"{path} does not exist", "not_found")
        entry = await self._load(real)
        assert entry.current is not None
        return entry.current

    async def write(self, path: str, data: bytes, *, create_parents: bool) -> None:
        state, real = await self._follow(path)
        if state is None:
            missing = await self._missing_parents(real)
            # Parents are created for the path as written; a dangling link's target
            # directory is not (upstream's write through the link fails then).
            if missing and (not create_parents or real != path):
                raise _failure(f"the parent directory of {real} does not exist", "not_found")
            for directory in missing:
                self.new_dirs.append(directory)
                self._new_dir_set.add(directory)
            entry = self.entries.get(real)
            if entry is not None:
                entry.current = data  # deleted earlier in the patch: its original stays journaled
            else:
                self.entries[real] = _Entry(None, data)
            return
        if state != "file":
            raise _failure(f"{real} is not a regular file ({state})", "not_a_file")
        entry = await self._load_for_change(real)
        entry.current = data

    async def _load_for_change(self, path: str) -> _Entry:
        try:
            return await self._load(path)
        except StoreFailure as exc:
            raise _failure(exc.detail or exc.reason, exc.code) from None

    async def _missing_parents(self, path: str) -> list[str]:
        """Ancestors to create, outermost first; StoreFailure when one is not a directory."""
        missing: list[str] = []
        parent = posixpath.dirname(path)
        while parent != "/" and parent != self.root:
            try:
                state = await self._state(parent)
            except StoreFailure:
                break  # the backend will not say (outside its root): let the commit decide
            if state in ("directory", "symlink"):
                break  # a link to a directory is resolved by the backend at commit
            if state is not None:
                raise _failure(f"{parent} is not a directory", "not_a_directory")
            missing.append(parent)
            parent = posixpath.dirname(parent)
        return missing[::-1]

    async def delete(self, path: str) -> None:
        state = await self._state(path)
        if state == "file":
            entry = await self._load_for_change(path)
            entry.current = None
            return
        if state is None:
            raise _failure(f"{path} does not exist", "not_found")
        if state in ("directory", "notdir"):
            raise _failure(f"{path} is not a file; a Delete File section removes files only", "not_a_file")
        raise _failure(_ATOMIC_LINK, "patch_atomic_unsupported")

    async def remove(self, path: str) -> None:
        state = await self._state(path)
        if state == "file":
            (await self._load_for_change(path)).current = None
            self.moved_from.add(path)
            return
        if state is None:
            raise _failure(f"{path} does not exist", "not_found")
        raise _failure(_ATOMIC_LINK, "patch_atomic_unsupported")

    async def peek(self, path: str) -> bytes | None:
        try:
            return await self.read(path)
        except StoreFailure:
            return None

    # -- the outcome --------------------------------------------------------------------

    def changes(self) -> list[Change]:
        return [Change(p, e.original, e.current) for p, e in self.entries.items() if e.original != e.current]


async def make_dirs(fs: FileSystem, directories: list[str]) -> None:
    from codespace.contract import MakeDirRequest

    for directory in directories:
        await fs.make_dir(MakeDirRequest(path=directory, parents=True, exist_ok=True))

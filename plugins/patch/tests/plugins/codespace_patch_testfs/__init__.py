"""A test-only FileSystem backend: plain ``os`` calls confined to the workspace root.

The real backend (``plugins/fs``) resolves beneath a root directory fd with
no-follow semantics; this one is simpler and only for the patch plugin's tests,
pin check and benchmarks, where the real one may not be installed. It still
refuses any path (or link target) outside the workspace, so a test that
escapes fails loudly instead of writing elsewhere.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat as st

from codespace import hookimpl
from codespace.contract import (
    DirEntry,
    FsError,
    ListDirResult,
    MakeDirResult,
    RemoveResult,
    StatResult,
)

_KINDS = {
    st.S_IFREG: "file", st.S_IFDIR: "directory", st.S_IFLNK: "symlink", st.S_IFIFO: "fifo",
    st.S_IFSOCK: "socket", st.S_IFCHR: "char_device", st.S_IFBLK: "block_device",
}


def _kind(mode: int) -> str:
    return _KINDS.get(st.S_IFMT(mode), "other")


class TestFileSystem:
    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)

    # -- confinement ------------------------------------------------------------------

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + "/")

    def _check(self, path: str) -> str:
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            raise FsError(f"not an absolute normalised path: {path}", path=path, errno=errno.EINVAL)
        if not self._inside(path):
            raise FsError(f"{path} is outside the workspace", path=path, errno=errno.EXDEV)
        parent = os.path.realpath(os.path.dirname(path))
        if path != self.root and not self._inside(parent):
            raise FsError(f"{path}: a parent directory leads outside the workspace", path=path, errno=errno.EXDEV)
        return path

    def _follow(self, path: str) -> str:
        real = os.path.realpath(self._check(path))
        if not self._inside(real):
            raise FsError(f"{path} is a link leading outside the workspace ({real})", path=path, errno=errno.EXDEV)
        return real

    @staticmethod
    def _os_error(exc: OSError, path: str, action: str) -> FsError:
        return FsError.from_os(exc, path, action)

    # -- raw access for the patcher ------------------------------------------------------

    async def read_bytes(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        target = self._follow(path) if follow_symlink else self._check(path)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlink else os.O_NOFOLLOW)
        try:
            fd = os.open(target if follow_symlink else path, flags)
        except OSError as exc:
            raise self._os_error(exc, path, "read") from None
        try:
            info = os.fstat(fd)
            if st.S_ISDIR(info.st_mode):
                raise FsError(f"cannot read {path}: it is a directory", path=path, errno=errno.EISDIR)
            if not st.S_ISREG(info.st_mode):
                raise FsError(f"cannot read {path}: not a regular file", path=path, errno=errno.EINVAL)
            if info.st_size > max_bytes:
                raise FsError(f"cannot read {path}: {info.st_size} bytes is over the {max_bytes}-byte limit",
                              path=path, errno=errno.EFBIG)
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    async def write_bytes(self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
                          durable: bool = True, in_place: bool = False) -> None:
        self._check(path)
        if create_parents:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except OSError as exc:
                raise self._os_error(exc, path, "create the parents of") from None
        target = path
        if os.path.islink(path):
            if not follow_symlink:
                raise FsError(f"{path} is a symbolic link", path=path, errno=errno.ELOOP)
            target = self._follow(path)
        try:
            info = os.stat(target)
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise self._os_error(exc, path, "write") from None
        else:
            if st.S_ISDIR(info.st_mode):
                raise FsError(f"cannot write {path}: it is a directory", path=path, errno=errno.EISDIR)
            mode = st.S_IMODE(info.st_mode)
            if in_place and st.S_ISREG(info.st_mode) and info.st_nlink == 1:
                try:
                    fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
                    try:
                        os.pwrite(fd, data, 0)
                        os.ftruncate(fd, len(data))
                    finally:
                        os.close(fd)
                except OSError as exc:
                    raise self._os_error(exc, path, "write") from None
                return
        # The temporary name lives beside the workspace, not in it: a writer killed
        # between write and rename leaves nothing in the tree (a real backend would
        # clean its strays at start-up instead).
        spare = os.path.join(os.path.dirname(self.root), f".{os.path.basename(self.root)}.testfs-tmp")
        os.makedirs(spare, exist_ok=True)
        tmp = os.path.join(spare, f"{os.getpid()}-{id(data)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise self._os_error(exc, path, "write") from None
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            raise self._os_error(exc, path, "write") from None
        finally:
            os.close(fd)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            os.unlink(tmp)
            raise self._os_error(exc, path, "write") from None

    async def sync(self) -> None:
        os.sync()

    async def delete_file(self, path: str) -> None:
        self._check(path)
        try:
            if st.S_ISDIR(os.lstat(path).st_mode):
                raise FsError(f"cannot delete {path}: it is a directory", path=path, errno=errno.EISDIR)
            os.unlink(path)
        except OSError as exc:
            raise self._os_error(exc, path, "delete") from None

    async def kind(self, path: str):  # noqa: ANN201
        self._check(path)
        try:
            return _kind(os.lstat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._os_error(exc, path, "inspect") from None

    # -- the tool-level methods the patcher uses ----------------------------------------------

    async def stat(self, request):  # noqa: ANN001, ANN201
        path = self._check(request.path)
        try:
            info = os.stat(self._follow(path)) if request.follow_symlinks else os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return StatResult(path=path, exists=False)
        except OSError as exc:
            raise self._os_error(exc, path, "stat") from None
        kind = _kind(info.st_mode)
        return StatResult(
            path=path, exists=True, kind=kind, size=info.st_size, mode=f"{st.S_IMODE(info.st_mode):04o}",
            is_file=kind == "file", is_directory=kind == "directory", is_symlink=kind == "symlink",
            target=os.readlink(path) if kind == "symlink" else None,
        )

    async def make_dir(self, request):  # noqa: ANN001, ANN201
        path = self._check(request.path)
        existed = os.path.isdir(path)
        try:
            if request.parents:
                os.makedirs(path, exist_ok=request.exist_ok)
            else:
                os.mkdir(path)
        except OSError as exc:
            raise self._os_error(exc, path, "create") from None
        return MakeDirResult(path=path, created=not existed)

    async def list_dir(self, request):  # noqa: ANN001, ANN201
        path = self._check(request.path)
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            raise self._os_error(exc, path, "list") from None
        entries = [DirEntry(name=n, kind=_kind(os.lstat(os.path.join(path, n)).st_mode)) for n in names]
        return ListDirResult(path=path, entries=entries, truncated=False)

    async def remove(self, request):  # noqa: ANN001, ANN201
        path = self._check(request.path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                if not request.recursive:
                    raise FsError(f"{path} is a directory; pass recursive=true", path=path, errno=errno.EISDIR)
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            if request.force:
                return RemoveResult(path=path, removed=False, entries_removed=0)
            raise FsError(f"{path} does not exist", path=path, errno=errno.ENOENT) from None
        except OSError as exc:
            raise self._os_error(exc, path, "remove") from None
        return RemoveResult(path=path, removed=True, entries_removed=1)

    async def read_file(self, request):  # noqa: ANN001, ANN201
        raise FsError("the patch tests' file-system backend serves only the patcher", errno=errno.ENOSYS)

    write_file = walk = move = read_file


@hookimpl
def codespace_filesystem(workspace):  # noqa: ANN001, ANN201
    return TestFileSystem(str(workspace.root))

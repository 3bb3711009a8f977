"""Moves, between two parent directory fds.

``renameat`` moves a name, never what a link points to. Without ``overwrite`` the
move uses ``renameat2(RENAME_NOREPLACE)``, so "refuse to replace" holds even when
someone creates the destination at the same instant; file systems without it get
a check-then-rename, which can lose that race. A directory's contents are checked
against the policy at both ends first (see :func:`removing.check_tree`).
"""

from __future__ import annotations

import errno
import os
import stat

from codespace.contract import FsError

from . import errors, kernel
from .removing import check_tree
from .resolve import Confinement
from .writing import lstat_at

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    import threading

    from codespace.contract import MoveRequest, MoveResult


def move(conf: Confinement, request: MoveRequest, cancel: threading.Event | None = None) -> MoveResult:
    from codespace.contract import MoveResult

    source, destination = request.source, request.destination
    src, src_name = conf.open_parent(source, need="write", action="move")
    try:
        dst, dst_name = conf.open_parent(destination, need="write", action="move")
    except BaseException:
        os.close(src.fd)
        raise
    try:
        st = lstat_at(src.fd, src_name, source, "move")
        if st is None:
            raise FsError(f"cannot move {source}: it does not exist. To proceed: check the path with list_dir.",
                          path=source, errno=errno.ENOENT)
        before = lstat_at(dst.fd, dst_name, destination, "move")
        same = before is not None and (before.st_dev, before.st_ino) == (st.st_dev, st.st_ino)
        if same and src.path == dst.path:
            return MoveResult(source=source, destination=destination, overwritten=False)
        if before is not None and not request.overwrite:
            raise _exists(destination)
        if same and not stat.S_ISDIR(st.st_mode):
            # Two hard links to one file: rename(2) would do nothing and leave the
            # source; the move's meaning is "only the destination remains".
            try:
                os.unlink(src_name, dir_fd=src.fd)
            except OSError as exc:
                raise errors.os_error(exc, source, "move") from exc
            return MoveResult(source=source, destination=destination, overwritten=True)
        if stat.S_ISDIR(st.st_mode):
            if dst.path == src.path or dst.path.startswith(src.path.rstrip("/") + "/"):
                raise FsError(
                    f"cannot move {source} into itself ({destination}). To proceed: choose a destination outside it.",
                    path=source, errno=errno.EINVAL,
                )
            check_tree(conf, src.fd, src_name, (src.path, dst.path), "move", cancel)
        if cancel is not None and hasattr(cancel, "commit"):
            cancel.commit()  # the rename below is the move: from here a cancel must not hide that it happened
        try:
            if request.overwrite:
                os.rename(src_name, dst_name, src_dir_fd=src.fd, dst_dir_fd=dst.fd)
            else:
                _rename_noreplace(src.fd, src_name, dst.fd, dst_name, destination)
        except FsError:
            raise
        except OSError as exc:
            where = destination if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR) else source
            raise errors.os_error(exc, where, "move") from exc
        return MoveResult(source=source, destination=destination, overwritten=before is not None)
    finally:
        os.close(src.fd)
        os.close(dst.fd)


def _exists(destination: str) -> FsError:
    return FsError(
        f"cannot move to {destination}: it already exists. To proceed: pass overwrite=true to replace it, or choose "
        "another destination.", path=destination, errno=errno.EEXIST,
    )


def _rename_noreplace(src_fd: int, src_name: str, dst_fd: int, dst_name: str, destination: str) -> None:
    try:
        kernel.renameat2(src_fd, os.fsencode(src_name), dst_fd, os.fsencode(dst_name), kernel.RENAME_NOREPLACE)
        return
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise _exists(destination) from None
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise
    if lstat_at(dst_fd, dst_name, destination, "move") is not None:
        raise _exists(destination)
    os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


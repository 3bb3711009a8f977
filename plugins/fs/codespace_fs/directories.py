"""Directory creation, one ``mkdirat`` at a time beneath the fd of the level above.

``ensure_dir`` and ``ensure_parent`` serve writes that create their parents;
``make_dir`` is the tool. A directory reached through a link is re-checked
against the policy where it really is before anything is created in it.
"""

from __future__ import annotations

import errno
import os

from codespace.contract import FsError

from . import errors
from .names import join, lstat_at
from .ownership import AS_ROOT, take_parent_owner
from .reading import kind_of
from .resolve import O_CLOEXEC, O_DIR, O_NOFOLLOW, Confinement, Opened
from .syncing import fsync_quietly

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    from codespace.contract import MakeDirRequest, MakeDirResult

_DIR_FLAGS = os.O_RDONLY | O_DIR | O_NOFOLLOW | O_CLOEXEC


def _dirname(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _check(conf: Confinement, target: str, shown: str) -> None:
    refusal = conf.rules.check_exact(target, "write")
    if refusal is not None:
        raise errors.refused(
            f"{shown} leads to {target}: {refusal.message}" if target != shown else refusal.message,
            path=shown, rule=refusal.rule, hint="write somewhere the policy makes writable (see workspace_info)",
        )


def ensure_parent(conf: Confinement, path: str, action: str) -> tuple[Opened, str]:
    """The parent directory of ``path`` (created as needed) and the leaf's name; when the
    parent was reached through a link, the leaf is re-checked where it really is."""
    parent = ensure_dir(conf, _dirname(path), action)
    name = path.rsplit("/", 1)[1]
    if parent.followed:
        try:
            _check(conf, join(parent.path, name), path)
        except FsError:
            os.close(parent.fd)
            raise
    return parent, name


def ensure_dir(conf: Confinement, path: str, action: str) -> Opened:
    """An ``O_RDONLY|O_DIRECTORY`` fd of directory ``path``, creating what is missing,
    one ``mkdirat`` at a time under the fd of the level above. A loop, not a recursion:
    a path may be thousands of levels deep (a RecursionError used to answer 2,000)."""
    missing: list[str] = []
    while True:
        try:
            opened = conf.open(path, os.O_RDONLY | O_DIR, need="write", follow_last=True, action=action)
            break
        except FsError as exc:
            if exc.errno != errno.ENOENT:
                raise
        parent_path = _dirname(path)
        if parent_path == path:  # pragma: no cover - "/" always exists
            raise FsError(f"cannot create {path}: no existing ancestor", path=path, errno=errno.ENOENT)
        missing.append(path)
        path = parent_path
    for child in reversed(missing):
        opened = _made_in(conf, opened, child)
    return opened


def _made_in(conf: Confinement, parent: Opened, path: str) -> Opened:
    """Directory ``path`` created (unless it appeared meanwhile) in ``parent``, which is closed."""
    try:
        name = path.rsplit("/", 1)[1]
        target = join(parent.path, name)
        _check(conf, target, path)
        created = False
        try:
            os.mkdir(name, 0o777, dir_fd=parent.fd)
            created = True
            # The file about to be written is fsync'ed in this new directory; the
            # directory's own entry must be durable too.
            fsync_quietly(parent.fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise errors.os_error(exc, path, "create the directory") from exc
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent.fd)
        except OSError as exc:
            # Created, then swapped for a link or a file before we opened it.
            raise errors.os_error(exc, path, "create the directory") from exc
        if created:
            take_parent_owner(fd, parent.fd)
        return Opened(fd, target, parent.followed)
    finally:
        os.close(parent.fd)


def _own_new(dirfd: int, name: str, path: str) -> None:
    if not AS_ROOT:
        return  # nothing to give: no descriptor to open
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
    except OSError as exc:  # swapped for a link or a file already
        raise errors.os_error(exc, path, "create the directory") from exc
    try:
        take_parent_owner(fd, dirfd)
    finally:
        os.close(fd)


def make_dir(conf: Confinement, request: MakeDirRequest) -> MakeDirResult:
    from codespace.contract import MakeDirResult

    path = request.path
    root = conf.root_for(path)
    try:
        is_root = not root.rel(path)
    finally:
        root.close()
    if is_root:
        if not request.exist_ok:
            raise FsError(f"cannot create {path}: it exists (it is the root). To proceed: pass exist_ok=true.",
                          path=path, errno=errno.EEXIST)
        return MakeDirResult(path=path, created=False)
    if request.parents:
        parent, name = ensure_parent(conf, path, "create the directory")
    else:
        try:
            parent, name = conf.open_parent(path, need="write", action="create the directory")
        except FsError as exc:
            if exc.errno == errno.ENOENT:
                raise FsError(
                    f"cannot create {path}: its parent directory does not exist. To proceed: pass parents=true.",
                    path=path, errno=errno.ENOENT,
                ) from None
            raise
    try:
        try:
            os.mkdir(name, 0o777, dir_fd=parent.fd)
            _own_new(parent.fd, name, path)
            return MakeDirResult(path=path, created=True)
        except FileExistsError:
            pass
        except OSError as exc:
            raise errors.os_error(exc, path, "create the directory") from exc
        st = lstat_at(parent.fd, name, path)
        kind = kind_of(st.st_mode) if st is not None else "file"
        if kind != "directory":
            what = "a symbolic link" if kind == "symlink" else f"a {kind.replace('_', ' ')}"
            raise FsError(
                f"cannot create the directory {path}: {what} of that name exists. To proceed: choose another name "
                "or remove it first.", path=path, errno=errno.EEXIST, details={"kind": kind},
            )
        if not request.exist_ok:
            raise FsError(
                f"cannot create {path}: the directory already exists. To proceed: pass exist_ok=true, or use it.",
                path=path, errno=errno.EEXIST,
            )
        return MakeDirResult(path=path, created=False)
    finally:
        os.close(parent.fd)

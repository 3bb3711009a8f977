"""File writes, through the parent directory's fd.

A write never modifies a file in place: the new content goes to an unnamed file
in the same directory (``O_TMPFILE``; a named hidden one where the file system
lacks it), is fsync'ed, gets a name only once complete, and replaces the target
with ``renameat``; then the directory is fsync'ed. A crash (kill -9, power loss)
leaves the old content or the new one, never a mix, and a hard link to some other
file is replaced rather than written through. The name is never followed: a link
at the leaf is refused (``write_bytes(follow_symlink=True)`` resolves it first,
inside the root, and writes the target the same way).

The one exception is ``write_in_place``, for a caller that journals (apply_patch).
Directory creation is :mod:`.directories`; deferred flushes are :mod:`.syncing`.
"""

from __future__ import annotations

import errno
import os
import stat

from codespace.contract import FsError

from . import errors, kernel
from .names import lstat_at, readlink_at
from .ownership import take_parent_owner
from .reading import CHUNK, kind_of, open_regular_at
from .resolve import O_CLOEXEC, O_NOFOLLOW, O_PATH, Confinement
from .syncing import fsync_quietly, pending_sync

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    from codespace.contract import WriteFileRequest, WriteFileResult

TMP_SUFFIX = ".codespace-tmp"


def decode_content(request: WriteFileRequest) -> bytes:
    if request.encoding == "text":
        try:
            return request.content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FsError(
                f"content holds a lone surrogate at character {exc.start}, which UTF-8 cannot encode. To proceed: "
                "send valid text, or the bytes with encoding='base64'.", path=request.path, code="invalid_content",
            ) from None
    import base64
    import binascii

    try:
        return base64.b64decode(request.content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FsError(
            f"content is not valid base64 ({exc}). To proceed: encode the bytes with standard base64 (A-Z a-z 0-9 + /, "
            "'=' padding) or send text with encoding='text'.", path=request.path, code="invalid_content",
        ) from None


def write_file(conf: Confinement, request: WriteFileRequest, *, max_file_bytes: int) -> WriteFileResult:
    from codespace.contract import WriteFileResult

    data = decode_content(request)
    created, previous = write_atomic(
        conf, request.path, data, max_file_bytes=max_file_bytes, expected_sha256=request.expected_sha256,
        must_not_exist=request.must_not_exist, create_parents=request.create_parents,
    )
    import hashlib

    return WriteFileResult(
        path=request.path, size=len(data), sha256=hashlib.sha256(data).hexdigest(), created=created,
        previous_sha256=previous,
    )


def write_in_place(
    conf: Confinement, path: str, data: bytes, *, max_file_bytes: int, create_parents: bool = False,
    follow_symlink: bool = False, durable: bool = True,
) -> None:
    """Rewrite an existing regular file's bytes on the same inode (mode, owner, ACLs and
    extended attributes stay as they are) by writing over it and truncating to the new
    length, never truncating first: ext4 flushes a file replaced by rename or rewritten
    after ``O_TRUNC`` at once, which measured 20-35 ms for 200 small files against 1 ms
    this way. A reader may see the file half-written and a crash may leave it torn, so a
    caller that needs atomicity journals the old content first (as apply_patch's atomic
    mode does). A path that is absent, not a regular file, or a file with other hard
    links (which may lie outside the root) gets an atomic replace instead."""
    _check_size(path, data, max_file_bytes)
    try:
        opened = conf.open(path, O_PATH, need="write", follow_last=follow_symlink, action="write")
    except FsError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise
        opened = None  # absent, or a link we may not follow: the replace reports it properly
    if opened is not None:
        try:
            st = os.fstat(opened.fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and _proc_fd_links():
                # Reopened through the O_PATH descriptor: the same inode, whatever happened
                # to the path meanwhile.
                fd = os.open(f"/proc/self/fd/{opened.fd}", os.O_WRONLY | os.O_NOCTTY | O_CLOEXEC)
                try:
                    view = memoryview(data)
                    offset = 0
                    while offset < len(view):
                        offset += os.pwrite(fd, view[offset:offset + CHUNK * 8], offset)
                    os.ftruncate(fd, len(data))
                    if kept_mode(st.st_mode) != stat.S_IMODE(st.st_mode):
                        os.fchmod(fd, kept_mode(st.st_mode))
                    if durable:
                        os.fsync(fd)
                    else:
                        pending_sync.add(st.st_dev, fd)
                finally:
                    os.close(fd)
                return
        except OSError as exc:
            raise errors.os_error(exc, opened.path, "write") from exc
        finally:
            os.close(opened.fd)
    write_atomic(conf, path, data, max_file_bytes=max_file_bytes, create_parents=create_parents,
                 follow_symlink=follow_symlink, durable=durable, report_previous=False)


def kept_mode(st_mode: int) -> int:
    """The mode a rewritten file keeps: its own, less set-user-ID (and set-group-ID on a
    group-executable file), as the kernel drops them when anyone without CAP_FSETID writes
    a file. A root server writes as root, which keeps them: the agent's new content would
    then run with the file owner's privileges, for whoever runs it."""
    mode = stat.S_IMODE(st_mode) & ~stat.S_ISUID
    if mode & stat.S_IXGRP:
        mode &= ~stat.S_ISGID
    return mode


def _check_size(path: str, data: bytes, max_file_bytes: int) -> None:
    if len(data) > max_file_bytes:
        raise FsError(
            f"cannot write {path}: the content is {len(data)} bytes and the limit (limits.max_file_bytes) is "
            f"{max_file_bytes}. To proceed: write a smaller file.", path=path, errno=errno.EFBIG,
        )


def write_atomic(
    conf: Confinement,
    path: str,
    data: bytes,
    *,
    max_file_bytes: int,
    expected_sha256: str | None = None,
    must_not_exist: bool = False,
    create_parents: bool = False,
    follow_symlink: bool = False,
    durable: bool = True,
    report_previous: bool = True,
) -> tuple[bool, str | None]:
    """Replace ``path``'s content with ``data``; (whether it was created, the sha256 it had)."""
    _check_size(path, data, max_file_bytes)
    if follow_symlink:
        path = _follow_leaf(conf, path)
    if create_parents:
        from .directories import ensure_parent  # here: rewriting a file in place (the patch helper's usual write) needs none

        parent, name = ensure_parent(conf, path, "write")
    else:
        parent, name = conf.open_parent(path, need="write", action="write")
    try:
        return _replace(parent.fd, name, path, data, expected_sha256, must_not_exist, durable, report_previous,
                        unread_links=conf.refuse_hardlinks)
    finally:
        os.close(parent.fd)


def _replace(
    dirfd: int, name: str, path: str, data: bytes, expected: str | None, must_not_exist: bool,
    durable: bool = True, report_previous: bool = True, *, unread_links: bool = False,
) -> tuple[bool, str | None]:
    before, previous = _existing(dirfd, name, path, expected, must_not_exist, report_previous, unread_links)
    mode = kept_mode(before.st_mode) if before is not None else 0o666
    fd, tmp = _open_temp(dirfd, mode, path)
    try:
        try:
            _fill(fd, data, before, mode, durable)
            if before is None:
                take_parent_owner(fd, dirfd)
            if expected is not None:
                _recheck(dirfd, name, path, expected, before)
            if tmp is None:
                # Unnamed until complete: a kill before this point leaves nothing behind.
                if must_not_exist or before is None:
                    try:
                        _link_fd(fd, dirfd, name)
                        tmp = ""  # in place under its own name: nothing to rename
                    except FileExistsError:
                        if must_not_exist:
                            raise _created_meanwhile(path) from None
                if tmp is None:
                    tmp = f".{os.urandom(8).hex()}{TMP_SUFFIX}"
                    _link_fd(fd, dirfd, tmp)
        finally:
            os.close(fd)
        if tmp:
            if must_not_exist:
                _rename_noreplace(dirfd, tmp, name, path)
            else:
                os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException as exc:
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dirfd)
            except OSError:
                pass
        if isinstance(exc, OSError):
            raise errors.os_error(exc, path, "write") from exc
        raise
    if durable:
        fsync_quietly(dirfd)
    else:
        pending_sync.add(os.fstat(dirfd).st_dev, dirfd)
    return before is None, previous


def _existing(
    dirfd: int, name: str, path: str, expected: str | None, must_not_exist: bool, report_previous: bool,
    unread_links: bool = False,
) -> tuple[os.stat_result | None, str | None]:
    """What the write is to replace, checked: its lstat (None when absent) and, when
    asked for, its SHA-256. ``unread_links`` (``filesystem.hardlinks = 'refuse'``): a file
    with several links is not hashed either, since a hash says what reads may not (found by
    testing from outside: previous_sha256 gave that of a hidden file's content)."""
    before = lstat_at(dirfd, name, path)
    previous = None
    if before is not None:
        kind = kind_of(before.st_mode)
        if kind == "symlink":
            raise errors.leaf_link(path, readlink_at(dirfd, name), "write")
        if kind != "file":
            raise errors.not_regular(path, kind, "write")
        if must_not_exist:
            raise FsError(
                f"cannot write {path}: it already exists and must_not_exist=true. To proceed: read it first, then "
                "write with expected_sha256, or choose another name.", path=path, errno=errno.EEXIST,
            )
        if unread_links and before.st_nlink > 1:
            if expected is not None:
                raise errors.refused(
                    f"cannot check expected_sha256 against {path}: it has {before.st_nlink} hard links, and the "
                    "policy forbids reading such files (rule filesystem.hardlinks = 'refuse')", path=path,
                    rule="filesystem.hardlinks", hint="write without expected_sha256: the name gets a new file, "
                    "and its other links keep their content")
        elif report_previous or expected is not None:
            previous = _hash_at(dirfd, name, path)
    if expected is not None:
        _check_expected(path, expected, previous)
    return before, previous


def _fill(fd: int, data: bytes, before: os.stat_result | None, mode: int, durable: bool) -> None:
    _write_all(fd, data)
    if before is not None:
        # O_CREAT applied the umask; an existing file keeps its exact mode
        # (and owner, when we are allowed to set it).
        os.fchmod(fd, mode)
        if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.fchown(fd, before.st_uid, before.st_gid)
            except PermissionError:
                pass
    if durable:
        os.fsync(fd)


def _recheck(dirfd: int, name: str, path: str, expected: str, before: os.stat_result | None) -> None:
    # Narrow the window between the hash check and the rename: if the file
    # changed meanwhile, hash it again.
    now = lstat_at(dirfd, name, path)
    if not _same_version(before, now):
        current = _hash_at(dirfd, name, path) if now is not None and stat.S_ISREG(now.st_mode) else None
        _check_expected(path, expected, current)


def _check_expected(path: str, expected: str, current: str | None) -> None:
    if current is None:
        raise FsError(
            f"refused: {path} does not exist, but expected_sha256 was given. To proceed: drop expected_sha256 to "
            "create it, or check the path.", path=path, errno=errno.ENOENT, code="stale",
            details={"expected_sha256": expected, "current_sha256": None},
        )
    if current != expected:
        raise FsError(
            f"refused: {path} changed since it was read (its SHA-256 is now {current}, not {expected}). To proceed: "
            "read it again, redo your edit on the current content, and write with the new hash.",
            path=path, code="stale", details={"expected_sha256": expected, "current_sha256": current},
        )


def _open_temp(dirfd: int, mode: int, path: str) -> tuple[int, str | None]:
    """A file to write the new content into: an unnamed one (``O_TMPFILE``; name None)
    where the file system offers it, so that a writer killed mid-write leaves no stray
    file; otherwise a hidden temporary name beside the target."""
    if _proc_fd_links():
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | O_CLOEXEC, mode, dir_fd=dirfd), None
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise errors.os_error(exc, path, "write") from exc
    tmp = f".{os.urandom(8).hex()}{TMP_SUFFIX}"
    try:
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode, dir_fd=dirfd), tmp
    except OSError as exc:
        raise errors.os_error(exc, path, "write") from exc


_PROC_FD_LINKS: list[bool] = []


def _proc_fd_links() -> bool:
    """Is /proc/self/fd there? Asked once (functools.cache would cost the patch helper 3 ms)."""
    if not _PROC_FD_LINKS:
        _PROC_FD_LINKS.append(os.path.isdir("/proc/self/fd"))
    return _PROC_FD_LINKS[0]


def _link_fd(fd: int, dirfd: int, name: str) -> None:
    # linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; through /proc it needs nothing.
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dirfd, follow_symlinks=True)


def _created_meanwhile(path: str) -> FsError:
    return FsError(
        f"cannot write {path}: it was created by someone else meanwhile and must_not_exist=true. To proceed: "
        "read it, then decide.", path=path, errno=errno.EEXIST,
    )


def _rename_noreplace(dirfd: int, tmp: str, name: str, path: str) -> None:
    try:
        kernel.renameat2(dirfd, os.fsencode(tmp), dirfd, os.fsencode(name), kernel.RENAME_NOREPLACE)
        return
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise _created_meanwhile(path) from None
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise
    # No RENAME_NOREPLACE on this file system: link(2) also refuses to replace.
    try:
        os.link(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd, follow_symlinks=False)
    except FileExistsError:
        raise _created_meanwhile(path) from None
    os.unlink(tmp, dir_fd=dirfd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[:CHUNK * 8])
        view = view[written:]


def _same_version(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def _hash_at(dirfd: int, name: str, path: str) -> str:
    import hashlib  # only where a digest is asked for: byte writes (the patch helper) need none

    fd, _ = open_regular_at(dirfd, name, path, "read")
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _follow_leaf(conf: Confinement, path: str) -> str:
    """The path a leaf link leads to (inside the root, re-checked for writing), or
    ``path`` itself when it is no link or does not exist yet."""
    try:
        opened = conf.open(path, O_PATH, need="write", follow_last=True, action="write")
    except FsError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return path
        raise
    os.close(opened.fd)
    return opened.path

"""Reads: regular files only, a line window or a byte window, hashes and encodings.

A path is opened ``O_PATH`` first and checked with ``fstat`` before any real open:
opening a FIFO blocks and opening a device can have effects (a watchdog arms, a
tape rewinds), so neither is ever opened for reading. Only a regular file is then
reopened through ``/proc/self/fd`` (the same inode, no second lookup to race).
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from _thread import _local as thread_local  # threading.local itself; threading costs the patch helper 4 ms

from codespace.contract import FsError

from . import errors
from .resolve import O_CLOEXEC, O_NOFOLLOW, O_PATH, Confinement

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    from codespace.contract import InvalidUtf8, ReadFileRequest, ReadFileResult

    from .resolve import Need

CHUNK = 1024 * 1024  # upstream streams reads in 1 MiB chunks
BINARY_SNIFF = 8000  # like git: a NUL byte in the first 8000 bytes means binary
_REOPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | O_CLOEXEC


def kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "other"


def reopen_regular(path_fd: int) -> int:
    """A readable fd for the regular file ``path_fd`` (an O_PATH fd) refers to;
    FileNotFoundError when /proc is not mounted (callers then look the name up again)."""
    return os.open(f"/proc/self/fd/{path_fd}", _REOPEN)


def open_regular(
    conf: Confinement, path: str, *, need: Need, follow: bool, action: str
) -> tuple[int, os.stat_result, str]:
    """(readable fd, stat, path the policy judged) for the regular file at ``path``."""
    opened = conf.open(path, O_PATH, need=need, follow_last=follow, action=action)
    try:
        st = os.fstat(opened.fd)
        _require_regular(st, path, opened.fd, action)
        if need == "read" and st.st_nlink > 1 and conf.refuse_hardlinks:
            raise errors.refused(
                f"{path} has {st.st_nlink} hard links; another name of it may lie where the policy "
                "forbids reading (rule filesystem.hardlinks = 'refuse')",
                path=path, rule="filesystem.hardlinks",
                hint="read a copy with a single link, or ask the operator to set filesystem.hardlinks = 'allow'",
            )
        try:
            return reopen_regular(opened.fd), st, opened.path
        except FileNotFoundError:
            # Without /proc: a second, non-following lookup, accepted only if it
            # reaches the same inode (anything else would be a swap in between).
            fd = conf.open(opened.path, _REOPEN, need=need, follow_last=False, action=action).fd
            if not _same(os.fstat(fd), st):
                os.close(fd)
                raise FsError(f"{path} changed while it was opened; retry", path=path, code="changed") from None
            return fd, st, opened.path
        except OSError as exc:
            raise errors.os_error(exc, path, action) from exc
    finally:
        os.close(opened.fd)


def open_regular_at(dirfd: int, name: str, path: str, action: str) -> tuple[int, os.stat_result]:
    """Like :func:`open_regular` for ``name`` inside an open directory (never following it)."""
    try:
        pfd = os.open(name, O_PATH | O_NOFOLLOW | O_CLOEXEC, dir_fd=dirfd)
    except OSError as exc:
        raise errors.os_error(exc, path, action) from exc
    try:
        st = os.fstat(pfd)
        _require_regular(st, path, pfd, action)
        try:
            return reopen_regular(pfd), st
        except FileNotFoundError:
            fd = os.open(name, _REOPEN | O_NOFOLLOW, dir_fd=dirfd)
            if not _same(os.fstat(fd), st):
                os.close(fd)
                raise FsError(f"{path} changed while it was opened; retry", path=path, code="changed") from None
            return fd, st
        except OSError as exc:
            raise errors.os_error(exc, path, action) from exc
    finally:
        os.close(pfd)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return a.st_dev == b.st_dev and a.st_ino == b.st_ino


def _require_regular(st: os.stat_result, path: str, fd: int, action: str) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kind = kind_of(st.st_mode)
    if kind == "symlink":
        # An O_PATH fd of a link: readlinkat(fd, "") gives its text.
        try:
            target = os.readlink("", dir_fd=fd)
        except OSError:
            target = None
        raise errors.leaf_link(path, target, action)
    raise errors.not_regular(path, kind, action)


def read_all(fd: int, size: int, limit: int, path: str) -> bytes:
    """The whole file, refusing more than ``limit`` bytes (it may grow while read)."""
    if size > limit:
        raise _too_large(path, size, limit)
    if size < CHUNK:
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        parts = [data]
        total = len(data)
    else:
        parts, total = [], 0
    while True:
        chunk = os.read(fd, min(CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_large(path, total, limit)


def _too_large(path: str, size: int, limit: int) -> FsError:
    return FsError(
        f"cannot read {path}: it is {size} bytes and the limit (limits.max_file_bytes) is {limit}. To proceed: "
        "read a part of it with a command such as head/tail/sed, or ask the operator to raise the limit.",
        path=path, errno=errno.EFBIG, details={"size": size, "limit": limit},
    )


class _CachedReader:
    """Reads a whole file only when the page cache holds all of it (``RWF_NOWAIT``), so
    the event loop can read inline without ever waiting for the disk.

    Each thread keeps its buffer between calls: a fresh 1 MB buffer costs more in page
    faults here than the read itself (0.6 ms against 0.05 ms, measured)."""

    def __init__(self) -> None:
        self._local = thread_local()

    def __call__(self, fd: int, size: int) -> bytes | None:
        """The content, or None when some of it is not cached, the file changed size
        or the file system cannot say; ``fd`` stays open, its offset unmoved."""
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or len(buffer) < size + 1:
            buffer = self._local.buffer = bytearray(size + 1)  # one byte more: a file that grew is not whole
        view = memoryview(buffer)[:size + 1]
        try:
            got = os.preadv(fd, [view], 0, os.RWF_NOWAIT)
        except (OSError, AttributeError):  # EAGAIN (not cached), EOPNOTSUPP; no preadv2 at all
            return None
        return bytes(view[:size]) if got == size else None


read_cached = _CachedReader()


def read_bytes(conf: Confinement, path: str, *, max_bytes: int, follow_symlink: bool) -> bytes:
    fd, st, _ = open_regular(conf, path, need="read", follow=follow_symlink, action="read")
    return read_bytes_from(fd, st, path, max_bytes)


def read_bytes_from(fd: int, st: os.stat_result, path: str, max_bytes: int) -> bytes:
    """The content of an opened regular file; closes ``fd``."""
    try:
        return read_all(fd, st.st_size, max_bytes, path)
    except OSError as exc:
        raise errors.os_error(exc, path, "read") from exc
    finally:
        os.close(fd)


def read_file(
    conf: Confinement, request: ReadFileRequest, *, max_file_bytes: int, default_max_bytes: int
) -> ReadFileResult:
    fd, st, _ = open_regular(conf, request.path, need="read", follow=True, action="read")
    return read_file_from(fd, st, request, max_file_bytes=max_file_bytes, default_max_bytes=default_max_bytes)


def read_file_from(
    fd: int, st: os.stat_result, request: ReadFileRequest, *, max_file_bytes: int, default_max_bytes: int
) -> ReadFileResult:
    """The ``read_file`` answer for an opened regular file; closes ``fd``."""
    path = request.path
    data = read_bytes_from(fd, st, path, max_file_bytes)
    import hashlib  # loaded by the first read_file: byte reads (the patch helper) need no digest

    digest = hashlib.sha256(data).hexdigest()
    max_bytes = min(request.max_bytes or default_max_bytes, max_file_bytes)
    if request.encoding == "base64":
        return _base64_window(path, data, digest, request.byte_offset, max_bytes)
    return _text_window(path, data, digest, request, max_bytes)


def _base64_window(path: str, data: bytes, digest: str, byte_offset: int, max_bytes: int) -> ReadFileResult:
    from codespace.contract import ReadFileResult

    if byte_offset > len(data):
        raise FsError(
            f"byte_offset {byte_offset} is past the end of {path} ({len(data)} bytes). To proceed: pass a "
            "byte_offset below the size.", path=path, code="out_of_range", details={"size": len(data)},
        )
    import base64

    raw_cap = max(3, max_bytes // 4 * 3)  # base64 text stays within max_bytes
    chunk = data[byte_offset: byte_offset + raw_cap]
    end = byte_offset + len(chunk)
    truncated = end < len(data)
    return ReadFileResult(
        path=path, size=len(data), sha256=digest, encoding="base64", content=base64.b64encode(chunk).decode("ascii"),
        start_line=0, end_line=0, total_lines=None, truncated=truncated, next_byte_offset=end if truncated else None,
    )


def _text_window(path: str, data: bytes, digest: str, request: ReadFileRequest, max_bytes: int) -> ReadFileResult:
    from codespace.contract import ReadFileResult

    nul = data.find(b"\0", 0, BINARY_SNIFF)
    if nul >= 0:
        raise FsError(
            f"{path} looks binary (a NUL byte at offset {nul}). To proceed: read it with encoding='base64'.",
            path=path, code="binary", details={"size": len(data), "sha256": digest},
        )
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    offset = request.offset
    if total == 0:
        return ReadFileResult(
            path=path, size=0, sha256=digest, encoding="text", content="",
            start_line=0, end_line=0, total_lines=0, truncated=False,
        )
    if offset > total:
        raise FsError(
            f"offset {offset} is past the end of {path}, which has {total} line(s). To proceed: pass an offset "
            f"between 1 and {total}.", path=path, code="out_of_range", details={"total_lines": total},
        )
    start = 0
    find = data.find
    for _ in range(offset - 1):
        start = find(b"\n", start) + 1
    end = len(data)
    if request.limit is not None:
        pos = start
        for _ in range(request.limit):
            nl = find(b"\n", pos)
            if nl < 0:
                pos = end
                break
            pos = nl + 1
        end = pos
    if end - start > max_bytes:
        cut = data.rfind(b"\n", start, start + max_bytes)
        if cut >= 0:
            end = cut + 1
        else:
            # A single line longer than the cap: cut it at a character boundary so
            # the call still makes progress (the rest of that line is skipped).
            end = start + max_bytes
            while end > start and data[end] & 0xC0 == 0x80:
                end -= 1
    window = data[start:end]
    lines = window.count(b"\n") + (0 if window.endswith(b"\n") else 1)
    end_line = offset + lines - 1
    text, invalid = _decode(window, request.errors, path, start, offset)
    truncated = end < len(data)
    return ReadFileResult(
        path=path, size=len(data), sha256=digest, encoding="text", content=text, start_line=offset,
        end_line=end_line, total_lines=total, truncated=truncated, next_offset=end_line + 1 if truncated else None,
        invalid_utf8=invalid,
    )


_counter = thread_local()


def _count_and_replace(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):  # pragma: no cover
        raise exc
    found = _counter.found
    found.append(exc.start)
    return "\ufffd", exc.end


codecs.register_error("codespace_fs_count_replace", _count_and_replace)


def _decode(window: bytes, mode: str, path: str, start: int, first_line: int) -> tuple[str, InvalidUtf8 | None]:
    try:
        return window.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        if mode == "strict":
            where = start + exc.start
            line = first_line + window.count(b"\n", 0, exc.start)
            bad = window[exc.start: exc.end].hex(" ")
            raise FsError(
                f"{path} is not valid UTF-8 at byte {where} (line {line}: bytes {bad}, {exc.reason}). To proceed: "
                "pass errors='replace' to get U+FFFD in place of invalid bytes, or encoding='base64' for raw bytes.",
                path=path, code="invalid_utf8", details={"byte_offset": where, "line": line},
            ) from None
    from codespace.contract import InvalidUtf8

    _counter.found = found = []
    text = window.decode("utf-8", "codespace_fs_count_replace")
    return text, InvalidUtf8(count=len(found), first_byte_offset=start + found[0])

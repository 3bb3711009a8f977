"""One directory's entries, and what one path is (stat / kind)."""

from __future__ import annotations

import errno
import os
import stat

from codespace.contract import FsError

from . import errors
from .reading import kind_of
from .resolve import O_DIR, O_PATH, Confinement

# The models load where they are built: a process that only moves bytes through the
# backend (the patch helper) then loads no pydantic.
TYPE_CHECKING = False  # not typing's: typing costs the patch helper (which loads this module) more than its patch
if TYPE_CHECKING:
    from codespace.contract import DirEntry, ListDirRequest, StatRequest, StatResult, ListDirResult, EntryError

NON_UTF8 = (
    "the name is not valid UTF-8, so it is shown with \\xNN escapes and the file tools cannot address it; "
    "rename it with a command (for example mv) to use it"
)


def _ms(ns: int) -> int:
    return ns // 1_000_000


def open_dir(conf: Confinement, path: str) -> tuple[int, os.stat_result]:
    opened = conf.open(path, os.O_RDONLY | O_DIR, need="read", follow_last=True, action="list")
    return opened.fd, os.fstat(opened.fd)


def list_dir(conf: Confinement, request: ListDirRequest, *, max_entries: int) -> ListDirResult:
    fd, _ = open_dir(conf, request.path)
    return list_dir_from(fd, request, max_entries=max_entries, refuse_hardlinks=conf.refuse_hardlinks)


def list_dir_from(fd: int, request: ListDirRequest, *, max_entries: int, refuse_hardlinks: bool = False) -> ListDirResult:
    """The ``list_dir`` answer for an opened directory; closes ``fd``. ``refuse_hardlinks``: a
    file with several links is listed without its size and time (they are the file's, which
    another name may hide), and says so."""
    from operator import attrgetter  # here: the patch helper, which lists nothing, imports this module

    from codespace.contract import EntryError, ListDirResult

    path = request.path
    cap = min(request.max_entries or max_entries, max_entries)
    try:
        try:
            with os.scandir(fd) as it:
                found = sorted(it, key=attrgetter("name"))
        except OSError as exc:
            raise errors.os_error(exc, path, "list") from exc
        entries: list[DirEntry] = []
        problems: list[EntryError] = []
        truncated = False
        for entry in found:
            name = entry.name
            if not request.include_hidden and name.startswith("."):
                continue
            if len(entries) >= cap:
                truncated = True
                break
            shown = name if name.isascii() or errors.is_safe(name) else errors.safe_name(name)
            if shown is not name:
                problems.append(EntryError(path=shown, message=NON_UTF8))
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                # Removed between readdir and stat: report it, keep the listing.
                problems.append(EntryError(path=shown, message=f"cannot stat: {exc.strerror}"))
                continue
            kind = kind_of(st.st_mode)
            if kind == "file" and refuse_hardlinks and st.st_nlink > 1:
                entries.append({"name": shown, "kind": kind, "withheld": errors.HARDLINKS_RULE})
                continue
            item = {"name": shown, "kind": kind, "mtime_ms": _ms(st.st_mtime_ns)}
            if kind == "file":
                item["size"] = st.st_size
            elif kind == "symlink":
                try:
                    item["target"] = errors.safe_name(os.readlink(name, dir_fd=fd))
                except OSError:
                    pass
            entries.append(item)
    finally:
        os.close(fd)
    return ListDirResult.model_construct(path=path, entries=entries, truncated=truncated, errors=problems)


def stat_path(conf: Confinement, request: StatRequest) -> StatResult:
    from codespace.contract import StatResult

    path = request.path
    try:
        opened = conf.open(path, O_PATH, need="read", follow_last=request.follow_symlinks, action="stat")
    except FsError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return StatResult(path=path, exists=False)
        raise
    try:
        st = os.fstat(opened.fd)
        target = None
        if stat.S_ISLNK(st.st_mode):
            try:
                target = errors.safe_name(os.readlink("", dir_fd=opened.fd))
            except OSError:
                target = None
    finally:
        os.close(opened.fd)
    kind = kind_of(st.st_mode)
    if kind == "file" and st.st_nlink > 1 and conf.refuse_hardlinks:
        return StatResult(path=path, exists=True, kind=kind, is_file=True, withheld=errors.linked_withheld(st.st_nlink))
    return StatResult(
        path=path, exists=True, kind=kind, size=st.st_size if kind in ("file", "symlink") else None,
        mode=f"{stat.S_IMODE(st.st_mode):04o}", mtime_ms=_ms(st.st_mtime_ns), ctime_ms=_ms(st.st_ctime_ns),
        is_file=kind == "file", is_directory=kind == "directory", is_symlink=kind == "symlink", target=target,
    )


def kind(conf: Confinement, path: str, *, follow: bool = False) -> str | None:
    """What ``path`` is (what a final link leads to with ``follow``, confined as stat_path is);
    None when nothing is there."""
    try:
        opened = conf.open(path, O_PATH, need="read", follow_last=follow, action="stat" if follow else "inspect")
    except FsError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    try:
        return kind_of(os.fstat(opened.fd).st_mode)
    finally:
        os.close(opened.fd)

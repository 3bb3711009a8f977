"""Running a parsed patch's sections in order (apply-patch.md §4, §6, §9).

Each section runs against the *current* state of a :class:`Store`: the real file
system (upstream mode, where a failure leaves earlier sections applied) or an
in-memory overlay of it (atomic mode, committed afterwards). The messages are
upstream's, whichever store is used.
"""

from __future__ import annotations

from codespace.contract.records import Record

from .applying import Rewrite, rewrite, rewrite_ascii
from .errors import NO_FILES, ApplyError, rust_utf8_error
from .parser import AddFile, DeleteFile, Patch, Section, UpdateFile


class StoreFailure(Exception):
    """A store operation failed; ``reason`` is the io::Error text upstream would show
    where its message has one; ``detail`` is what the backend said, for agents."""

    def __init__(self, reason: str, detail: str = "", code: str | None = None, *, parents: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        self.code = code
        self.parents = parents  # the write failed making the file's missing directories


# Names for type checkers only: typing costs the helper process more than its patch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal, Protocol

    class Store(Protocol):
        async def read(self, path: str) -> bytes:
            """The content of ``path`` (following links); StoreFailure otherwise."""

        async def write(self, path: str, data: bytes, *, create_parents: bool) -> None:
            """Replace or create ``path`` (writing through a final link)."""

        async def delete(self, path: str) -> None:
            """A Delete section: remove a file or a link to a file; never a directory."""

        async def remove(self, path: str) -> None:
            """Remove a moved file's source."""

        async def peek(self, path: str) -> bytes | None:
            """Best-effort current content for a diff (None when absent or unreadable)."""

    Action = Literal["add", "update", "delete", "move"]


class Done(Record):
    """One section that succeeded."""

    __slots__ = ("action", "shown", "path", "move_from", "before", "after", "rewrite")
    action: Action
    shown: str  # the path as the summary prints it
    path: str  # absolute
    move_from: str | None
    before: bytes | None  # for the diff
    after: bytes | None
    rewrite: Rewrite | None

    def __init__(self, action: Action, shown: str, path: str, move_from: str | None = None,
                 before: bytes | None = None, after: bytes | None = None, rewrite: Rewrite | None = None) -> None:
        self.action = action
        self.shown = shown
        self.path = path
        self.move_from = move_from
        self.before = before
        self.after = after
        self.rewrite = rewrite


class Run(Record):
    __slots__ = ("done",)
    done: list[Done]

    def __init__(self, done: list[Done] | None = None) -> None:
        self.done = [] if done is None else done

    def summary(self) -> str:
        letters = {"add": "A", "update": "M", "move": "M", "delete": "D"}
        lines = ["Success. Updated the following files:"]
        for group in ("A", "M", "D"):
            lines += [f"{group} {d.shown}" for d in self.done if letters[d.action] == group]
        return "\n".join(lines) + "\n"


def _write_failed(path: str, failure: StoreFailure) -> str:
    return f"Failed to create parent directories for {path}" if failure.parents else f"Failed to write file {path}"


def _fail(message: str, failure: StoreFailure | None = None, **details: object) -> ApplyError:
    hint = f"The file-system backend said: {failure.detail}" if failure is not None and failure.detail else ""
    code = (failure.code if failure is not None and failure.code else None) or "patch_io_error"
    return ApplyError(message, code=code, hint=hint, details={k: v for k, v in details.items() if v is not None})


async def run_sections(
    patch: Patch, resolve, store: Store, *, want_diff: bool = False, run: Run | None = None
) -> Run:
    """Apply ``patch`` through ``store``; ``resolve(path)`` gives the absolute path.

    Raises ApplyError at the first failing section; ``run`` (when passed) then holds
    the sections that succeeded before it.
    """
    run = run if run is not None else Run()
    if not patch.sections:
        raise ApplyError(NO_FILES, code="patch_empty", hint="The patch has no Add, Delete or Update File sections.")
    for section in patch.sections:
        run.done.append(await _section(section, resolve, store, want_diff))
    return run


async def _section(section: Section, resolve, store: Store, want_diff: bool) -> Done:
    path = resolve(section.path)
    if isinstance(section, AddFile):
        data = section.contents.encode("utf-8", "surrogatepass")
        before = await store.peek(path) if want_diff else None
        try:
            await store.write(path, data, create_parents=True)
        except StoreFailure as exc:
            raise _fail(_write_failed(path, exc), exc, path=path, section_line=section.line) from None
        return Done("add", section.path, path, before=before, after=data)
    if isinstance(section, DeleteFile):
        before = await store.peek(path) if want_diff else None
        try:
            await store.delete(path)
        except StoreFailure as exc:
            raise _fail(f"Failed to delete file {path}", exc, path=path, section_line=section.line) from None
        return Done("delete", section.path, path, before=before)
    return await _update(section, path, resolve, store, want_diff)


async def _update(section: UpdateFile, path: str, resolve, store: Store, want_diff: bool) -> Done:
    try:
        raw = await store.read(path)
    except StoreFailure as exc:
        raise _fail(f"Failed to read file to update {path}: {exc.reason}", exc, path=path, section_line=section.line) from None
    # Without a diff to show, an ASCII file is rewritten as bytes: the same bytes, without
    # decoding 700 KB and encoding them again (a tenth of the helper's run on a big file).
    data = None if want_diff else rewrite_ascii(raw, section.chunks)
    if data is not None:
        return await _store_update(section, path, resolve, store, raw, data, None)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApplyError(
            f"Failed to read file to update {path}: {rust_utf8_error(exc)}", code="patch_not_utf8",
            hint="Patches apply to UTF-8 text files only; this file is binary or in another encoding. "
            "Replace it with write_file (encoding='base64') instead.",
            details={"path": path, "byte_offset": exc.start},
        ) from None
    result = rewrite(text, section.chunks, path)
    return await _store_update(section, path, resolve, store, raw, result.text().encode("utf-8", "surrogatepass"),
                               result)


async def _store_update(
    section: UpdateFile, path: str, resolve, store: Store, raw: bytes, data: bytes, result: Rewrite | None,
) -> Done:
    """Write an Update section's result (to its destination, for a move)."""
    if section.move_to is None:
        try:
            await store.write(path, data, create_parents=False)
        except StoreFailure as exc:
            raise _fail(f"Failed to write file {path}", exc, path=path, section_line=section.line) from None
        return Done("update", section.path, path, before=raw, after=data, rewrite=result)
    destination = resolve(section.move_to)
    try:
        await store.write(destination, data, create_parents=True)
    except StoreFailure as exc:
        raise _fail(_write_failed(destination, exc), exc, path=destination, section_line=section.line) from None
    try:
        await store.remove(path)
    except StoreFailure as exc:
        raise _fail(f"Failed to remove original {path}", exc, path=path, section_line=section.line) from None
    return Done("move", section.move_to, destination, move_from=path, before=raw, after=data, rewrite=result)

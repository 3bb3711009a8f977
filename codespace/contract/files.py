"""File tools: the models the MCP tools and the FileSystem backend share.

Paths in requests reaching a backend are absolute and lexically normalised; the
gateway has checked them against the policy. Paths in results are absolute too.
"""

from typing import Annotated, Literal, Protocol, runtime_checkable

from typing_extensions import NotRequired, TypedDict

from pydantic import Field, field_validator

from ..models import Strict
from .globs import MAX_GLOBS

FileKind = Literal["file", "directory", "symlink", "fifo", "socket", "char_device", "block_device", "other"]


# --- read_file ---------------------------------------------------------------


class ReadFileRequest(Strict):
    path: str = Field(description="File to read, relative to the workspace root or absolute.")
    offset: int = Field(default=1, ge=1, description="First line to return, 1-based.")
    limit: int | None = Field(default=None, ge=1, description="Most lines to return (default: as many as fit max_bytes).")
    max_bytes: int | None = Field(
        default=None, ge=1, description="Cap on the returned text in bytes (default: the policy's limits.max_read_bytes)."
    )
    encoding: Literal["text", "base64"] = Field(
        default="text",
        description="'text' returns UTF-8 lines; 'base64' returns raw bytes (use for binary files) "
        "starting at byte_offset.",
    )
    errors: Literal["strict", "replace"] = Field(
        default="strict",
        description="For text: 'strict' refuses invalid UTF-8 and says where it is; 'replace' substitutes U+FFFD.",
    )
    byte_offset: int = Field(default=0, ge=0, description="For base64: first byte to return.")


class InvalidUtf8(Strict):
    count: int = Field(description="Invalid byte sequences replaced.")
    first_byte_offset: int = Field(description="Offset of the first one in the file.")


class ReadFileResult(Strict):
    path: str
    size: int = Field(description="File size in bytes.")
    sha256: str = Field(description="Hash of the whole file; pass it to write_file as expected_sha256.")
    encoding: Literal["text", "base64"]
    content: str = Field(description="The requested window (text) or bytes (base64).")
    start_line: int = Field(description="First line returned (text; 0 when none).")
    end_line: int = Field(description="Last line returned, inclusive (text; 0 when none).")
    total_lines: int | None = Field(description="Lines in the whole file (text).")
    truncated: bool = Field(description="More content follows the window.")
    next_offset: int | None = Field(default=None, description="For text: pass as offset to continue.")
    next_byte_offset: int | None = Field(default=None, description="For base64: pass as byte_offset to continue.")
    invalid_utf8: InvalidUtf8 | None = None


# --- write_file --------------------------------------------------------------


class WriteFileRequest(Strict):
    path: str = Field(description="File to write, relative to the workspace root or absolute.")
    content: str = Field(description="New content: text, or base64 when encoding='base64'.")
    encoding: Literal["text", "base64"] = Field(default="text", description="How content is encoded.")
    expected_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Refuse the write unless the current file has this SHA-256 (from read_file), "
        "so a change made since you read it is not lost.",
    )
    must_not_exist: bool = Field(default=False, description="Refuse the write if the file already exists.")
    create_parents: bool = Field(default=False, description="Create missing parent directories.")

    @field_validator("path")
    @classmethod
    def _names_a_file(cls, path: str) -> str:
        # The lexical normalisation drops a trailing '/', and "a.txt/" wrote a.txt (found by
        # testing from outside): as for open(2), a name ending in '/' is a directory's.
        last = path.rstrip("/").rpartition("/")[2] if path.rstrip("/") else ""
        if path.endswith("/") or last in (".", ".."):
            raise ValueError(f"the path ends with {'/' if path.endswith('/') else last!r}, which names a directory, "
                             "not a file; nothing was written. To proceed: name the file itself")
        return path


class WriteFileResult(Strict):
    path: str
    size: int
    sha256: str
    created: bool = Field(description="The file did not exist before.")
    previous_sha256: str | None = Field(description="Hash of the content replaced, if any.")


# --- list_dir / walk ---------------------------------------------------------


class ListDirRequest(Strict):
    path: str = Field(default=".", description="Directory to list.")
    include_hidden: bool = Field(default=True, description="Include names starting with '.'.")
    max_entries: int | None = Field(default=None, ge=1, description="Cap on entries (default: limits.walk_max_entries).")


# A plain mapping, like WalkEntry below: the backend builds the entries itself, and a
# validated model per entry (with its null fields) made list_dir half again as slow.
class DirEntry(TypedDict):
    """One entry of a directory; keys that do not apply are absent."""

    name: str
    kind: FileKind
    mtime_ms: NotRequired[int]
    size: NotRequired[Annotated[int, Field(description="Bytes, for regular files.")]]
    target: NotRequired[Annotated[str, Field(description="Link text, for symbolic links (never followed).")]]
    withheld: NotRequired[Annotated[str, Field(description=(
        "Present when size and mtime are withheld, naming the rule: 'filesystem.hardlinks' (the policy "
        "refuses files with several hard links, and this one has several)."))]]


class EntryError(Strict):
    path: str
    message: str


class ListDirResult(Strict):
    path: str
    entries: list[DirEntry]
    truncated: bool
    errors: list[EntryError] = Field(
        default_factory=list, description="Entries that could not be described (e.g. names that are not UTF-8)."
    )


class WalkRequest(Strict):
    path: str = Field(default=".", description="Directory to walk.")
    max_depth: int | None = Field(default=None, ge=0, description="Deepest level to descend (default: limits.walk_max_depth).")
    include: list[str] = Field(default_factory=list, max_length=MAX_GLOBS,
                               description="Glob patterns (gitignore-style) entries must match.")
    exclude: list[str] = Field(default_factory=list, max_length=MAX_GLOBS,
                               description="Glob patterns (gitignore-style) to leave out.")
    gitignore: bool = Field(default=False, description="Honour .gitignore files (and .git/info/exclude).")
    include_hidden: bool = Field(default=True, description="Include names starting with '.'.")
    prune_hidden_dirs: bool = Field(default=False, description="Do not descend into directories starting with '.'.")
    follow_dir_links: bool = Field(default=False, description="Descend into symbolic links to directories inside the root.")
    max_entries: int | None = Field(default=None, ge=1, description="Cap on entries (default: limits.walk_max_entries).")
    max_dirs: int | None = Field(default=None, ge=1, description="Cap on directories read (default: limits.walk_max_dirs).")
    max_bytes: int | None = Field(default=None, ge=1024, description="Cap on response size (default: limits.walk_max_response_bytes).")
    sizes: bool = Field(default=False, description="Report each regular file's size (one stat per file: slower on big trees).")


# A walk returns up to 50,000 of these.
class WalkEntry(TypedDict):
    """One entry found by a walk."""

    path: Annotated[str, Field(description="Relative to the walked directory, '/'-separated.")]
    kind: FileKind
    depth: Annotated[int, Field(description="1 for entries of the walked directory itself.")]
    size: NotRequired[Annotated[int | None, Field(description=(
        "Bytes, for regular files when sizes=true; null when unknown or withheld (filesystem.hardlinks = 'refuse' "
        "and the file has several hard links)."))]]


class WalkResult(Strict):
    path: str
    entries: list[WalkEntry]
    truncated: bool
    truncated_reason: str | None = Field(default=None, description="Which limit stopped the walk.")
    errors: list[EntryError] = Field(default_factory=list, description="Entries that could not be read; the walk went on.")
    dirs_visited: int


# --- stat / make_dir / move / remove ----------------------------------------


class StatRequest(Strict):
    path: str = Field(description="Path to describe.")
    follow_symlinks: bool = Field(default=False, description="Describe a link's target (inside the root) instead of the link.")


class StatResult(Strict):
    path: str
    exists: bool
    kind: FileKind | None = None
    size: int | None = None
    mode: str | None = Field(default=None, description="Permission bits in octal, e.g. '0644'.")
    mtime_ms: int | None = None
    ctime_ms: int | None = None
    is_file: bool = False
    is_directory: bool = False
    is_symlink: bool = False
    target: str | None = Field(default=None, description="Link text, for symbolic links.")
    withheld: str | None = Field(default=None, description=(
        "Why size, mode and times are null for a file that exists: the rule and the reason."))


class MakeDirRequest(Strict):
    path: str = Field(description="Directory to create.")
    parents: bool = Field(default=True, description="Create missing parents too.")
    exist_ok: bool = Field(default=True, description="Succeed if the directory already exists.")


class MakeDirResult(Strict):
    path: str
    created: bool


class MoveRequest(Strict):
    source: str = Field(description="Path to move.")
    destination: str = Field(description="New path.")
    overwrite: bool = Field(default=False, description="Replace an existing destination file.")


class MoveResult(Strict):
    source: str
    destination: str
    overwritten: bool


class RemoveRequest(Strict):
    path: str = Field(description="Path to remove (a link is removed, never followed).")
    recursive: bool = Field(default=False, description="Remove a directory and everything in it.")
    force: bool = Field(default=False, description="Succeed when the path does not exist.")


class RemoveResult(Strict):
    path: str
    removed: bool
    entries_removed: int


@runtime_checkable
class FileSystem(Protocol):
    """The file-system backend (plugins/fs implements it).

    A backend may build its results with ``model_construct`` (no validation) when it
    produced every value itself; ``walk`` results in particular should be.

    Each method receives absolute, lexically normalised paths that the gateway
    has checked against the policy. The backend must make the *use* safe: resolve
    beneath an open root directory fd with no-follow semantics, operate through
    the parent directory's fd, and re-check the object it reached when links were
    followed. Failures are raised as :class:`codespace.contract.FsError`.

    A backend may also implement :class:`SyncFileBytes` (the raw byte methods as blocking
    calls, for a one-shot process with no event loop); callers test for it with ``isinstance``.
    """

    async def read_file(self, request: ReadFileRequest) -> ReadFileResult: ...
    async def write_file(self, request: WriteFileRequest) -> WriteFileResult: ...
    async def list_dir(self, request: ListDirRequest) -> ListDirResult: ...
    async def walk(self, request: WalkRequest) -> WalkResult: ...
    async def stat(self, request: StatRequest) -> StatResult: ...
    async def make_dir(self, request: MakeDirRequest) -> MakeDirResult: ...
    async def move(self, request: MoveRequest) -> MoveResult: ...
    async def remove(self, request: RemoveRequest) -> RemoveResult: ...

    # Raw access for other backends (the patcher). Same confinement rules.
    async def read_bytes(self, path: str, *, max_bytes: int, follow_symlink: bool = False) -> bytes:
        """The whole content of a regular file; FsError(errno=ENOENT/EISDIR/EFBIG...) otherwise."""

    async def write_bytes(
        self, path: str, data: bytes, *, create_parents: bool = False, follow_symlink: bool = False,
        durable: bool = True, in_place: bool = False,
    ) -> None:
        """Atomically replace (or create) a regular file, keeping an existing file's mode.

        ``durable=False`` skips flushing to disk (still atomic against a crash of the
        process): for a caller that makes many writes durable at once with
        :meth:`sync`, e.g. under its own journal.

        ``in_place=True`` rewrites an existing regular file with no other hard links on
        its own inode instead (as upstream's apply_patch does; mode, owner and
        extended attributes untouched, and much cheaper on ext4). It is not atomic: a
        reader may see the file half-written and a crash may leave it torn, so only a
        caller that journals the old content first should ask for it. Anything else
        (absent, not a regular file, several links) is replaced atomically as usual."""

    async def sync(self) -> None:
        """Make every write done with ``durable=False`` so far durable."""

    async def delete_file(self, path: str) -> None:
        """Remove a file or a link (never its target); FsError(EISDIR) for a directory."""

    async def kind(self, path: str) -> FileKind | None:
        """What ``path`` is without following a final link; None when it does not exist."""

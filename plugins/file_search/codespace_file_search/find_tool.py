"""The ``find_files`` tool: Codex's fuzzy path search over the workspace, policy-filtered.

Upstream's ``fuzzyFileSearch`` re-walks the root on every call; here the walk is kept
(``walk_index``) and reused until inotify reports a change below the root that could
alter it, so an answer is never staler than the call, and a repeated search skips the
walk that costs Python as long as upstream's whole search.
"""

from __future__ import annotations

import os
import threading
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from codespace.contract import ToolDefinition, ToolError, one_line, run_cancellable

from . import LIMIT

# The matcher and the walker (pathspec, ctypes for inotify) load with the first search, not with
# the tool's definition: a server without a kept tool listing builds the listing from the
# definitions while its client waits.


class FindFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=1000, description=(
        "Fuzzy path query, as Codex's file search reads it: atoms separated by spaces, each a subsequence "
        "of the path; '^x' starts with x, 'x$' ends with x, \"'x\" contains x, '!x' must not contain x. "
        "Case-insensitive."))
    path: str = Field(default=".", description="Directory to search below (default: the workspace root).")
    limit: int = Field(default=LIMIT, ge=1, le=LIMIT, description=f"Most results to return (at most {LIMIT}).")


class FoundFile(BaseModel):
    path: str = Field(description="Path relative to the searched directory (a byte not UTF-8 reads \\xNN).")
    match_type: Literal["file", "directory"]
    file_name: str
    score: int = Field(description="Upstream's score: a tier in the high 16 bits above nucleo's score.")
    indices: list[int] = Field(description="Matched character positions in path (for highlighting).")


class FindFilesResult(BaseModel):
    root: str = Field(description="The searched directory, absolute.")
    files: list[FoundFile]
    total_matches: int = Field(description="Entries that matched, of which the best are listed.")
    entries_walked: int
    truncated: bool = Field(description="True when a limit stopped the walk: matches beyond it are missing.")
    truncated_reason: str | None = None


def bounds_of(workspace):  # noqa: ANN001, ANN201 - codespace WorkspaceView -> walk.Bounds
    """The walk's bounds under the policy's ``[limits]`` (and ``filesystem.hardlinks``): every
    walk of a root with the same policy has the same, so the warm-up's walk is the one a search keeps and finds."""
    from .walk import Bounds

    limits = workspace.limits
    return Bounds(entries=limits.walk_max_entries, dirs=limits.walk_max_dirs, depth=limits.walk_max_depth,
                  seconds=limits.walk_max_ms / 1000,
                  refuse_hardlinks=bool(getattr(workspace, "refuse_hardlinks", False)))


def _search(args: FindFilesArgs, root: str, rules, bounds, cancel: threading.Event) -> FindFilesResult:  # noqa: ANN001
    from .query import parse
    from .ranking import rank
    from .walk_index import INDEX

    query = parse(args.query)
    try:
        walked, _ = INDEX.walk(root, rules, bounds, cancel)
    except FileNotFoundError as exc:
        raise ToolError(f"find_files could not open {shown(root)}: {exc.strerror}", code="not_found") from None
    if walked.cancelled:
        raise ToolError(f"find_files in {shown(root)} was cancelled", code="cancelled")
    found, total = rank(query, walked.entries, args.limit, cancel, walked.memo)
    files = [_found(r.path, r.name, r.is_dir, r.score, r.indices) for r in found]
    return FindFilesResult(root=shown(root), files=files, total_matches=total, entries_walked=len(walked.entries),
                           truncated=walked.truncated is not None, truncated_reason=walked.truncated)


def shown(text: str) -> str:
    """``text`` as JSON can carry it: a name's bytes that are not UTF-8 (held as lone
    surrogates by ``os.fsdecode``) become ``\\xNN`` text, as list_dir, walk and grep show
    them. A lone surrogate left in the reply is invalid UTF-8 that strict clients reject
    (the MCP SDK drops the whole message, and the call never returns)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return text


def _shown_indices(path: str, indices: list[int]) -> list[int]:
    """Matched positions in ``path`` moved to where their characters stand in ``shown(path)``
    (an escaped byte takes four characters)."""
    starts, at = [], 0
    for char in path:
        starts.append(at)
        at += len(shown(char))
    return [starts[i] for i in indices]


def _found(path: str, name: str, is_dir: bool, score: int, indices: list[int]) -> FoundFile:
    escaped = shown(path)
    if escaped is not path:  # shown() returns its argument itself when nothing needs escaping
        path, name, indices = escaped, shown(name), _shown_indices(path, indices)
    return FoundFile(path=path, match_type="directory" if is_dir else "file", file_name=name, score=score,
                     indices=indices)


async def find_files(call, args: FindFilesArgs) -> FindFilesResult:  # noqa: ANN001 - codespace ToolCall
    rules = call.workspace.paths
    root = os.path.realpath(args.path)
    if root != args.path:
        refusal = rules.check_exact(root, "read")
        if refusal is not None:
            if rules.access(root) == "none":
                # Where the path leads is inside what the policy hides (a link there, swapped in
                # between two checks, once named its target here): name the rule, not the path.
                raise ToolError(f"refused by policy: {shown(args.path)} leads into a path the policy hides "
                                f"({refusal.rule})", code="refused")
            raise ToolError(f"refused by policy: {shown(args.path)} resolves to {shown(root)}: "
                            f"{shown(refusal.message)}", code="refused")
    if not os.path.isdir(root):
        raise ToolError(f"find_files needs a directory to search, and {shown(args.path)} is not one "
                        "(pass path as a directory, or omit it to search the workspace)", code="not_a_directory")
    bounds = bounds_of(call.workspace)
    result = await run_cancellable(lambda cancel: _search(args, root, rules, bounds, cancel))
    return result


def render(result: FindFilesResult) -> str:
    lines = [f"{one_line(f.path)}{'/' if f.match_type == 'directory' and f.path else ''}" for f in result.files]
    summary = f"{len(result.files)} of {result.total_matches} matches in {result.entries_walked} entries"
    if result.truncated:
        summary += f"; the walk was truncated ({result.truncated_reason}), so matches may be missing"
    return "\n".join([*lines, summary])


def find_files_tool() -> ToolDefinition:
    return ToolDefinition(
        name="find_files",
        title="Find files",
        description=("Fuzzy-find files and directories by path, ranked as Codex ranks them (best 50). "
                     "Hidden files are included; .gitignore applies inside git repositories and .ignore "
                     "everywhere; paths the policy hides never appear."),
        arguments=FindFilesArgs, result=FindFilesResult, handler=find_files, read_only=True,
        paths={"path": "read"}, render=render, runs_on_workspace=True,  # its own walker: in a worker when one serves
    )

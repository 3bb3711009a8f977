"""The ``grep`` tool: content search with ripgrep, kept inside what the policy lets the agent read.

The search is :mod:`.grep_search`, in three hops: the gateway checks ``path``; :mod:`.grep_target` opens it and checks the
object opened; rg runs on that object with the policy's hidden paths excluded from
its walk (:mod:`.grep_argv`), no links followed, no config or ignore files outside
the searched tree read; :mod:`.grep_process` and :mod:`.grep_collect` bound what
comes back.
"""

from __future__ import annotations

from codespace.contract import ToolCall, ToolDefinition, one_line, run_cancellable

from .grep_models import GrepArgs, GrepResult

DESCRIPTION = (
    "Search file contents (like ripgrep) under a directory or in one file: regex or literal, include/exclude "
    "globs, optional .gitignore, context lines, case sensitive/insensitive/smart. Files come in path order; "
    "binary files are skipped and counted; paths the policy hides are never searched. Bounded by max_matches, "
    "max_bytes and timeout_ms; when truncated, pass next_cursor to continue."
)


async def grep(call: ToolCall, args: GrepArgs) -> GrepResult:
    # Here, not at the top: a server without a kept tool listing builds it from the definitions
    # while its client waits, and the search's modules are not needed for that.
    from .grep_search import search

    rules, limits = call.workspace.paths, call.workspace.limits
    linked = bool(getattr(call.workspace, "refuse_hardlinks", False))  # filesystem.hardlinks = 'refuse'
    data = await run_cancellable(lambda cancel: search(args, rules, limits, cancel, refuse_hardlinks=linked))
    return GrepResult.model_validate(data)


def render(result: GrepResult) -> str:
    """grep -n -like lines: ``path:line:text`` for matches, ``path-line-text`` for context."""
    head = f"{len(result.matches)} matches in {result.files_with_matches} files"
    if result.binary_files_skipped:
        head += f", {result.binary_files_skipped} binary files skipped"
    if result.truncated:
        head += f" (truncated: {result.truncated_reason}; pass next_cursor to continue)"
    lines = [head]
    for m in result.matches:
        path = one_line(m.path)  # a name's newline would forge a match line
        lines += [f"{path}-{c.line_number}-{c.line}" for c in m.before]
        lines.append(f"{path}:{m.line_number}:{m.line}")
        lines += [f"{path}-{c.line_number}-{c.line}" for c in m.after]
    lines += [f"skipped: {one_line(s.path)}: {s.reason}" if s.path else f"skipped: {s.reason}" for s in result.skipped]
    if result.next_cursor:
        lines.append(f"next_cursor: {result.next_cursor}")
    return "\n".join(lines)


def grep_tool() -> ToolDefinition:
    return ToolDefinition(
        name="grep", title="Search file contents", description=DESCRIPTION, arguments=GrepArgs,
        result=GrepResult, handler=grep, read_only=True, paths={"path": "read"}, render=render,
        runs_on_workspace=True,  # rg on the files: in a worker when one serves
    )

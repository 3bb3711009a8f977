"""The file tools. Schemas live here, in the core, so they stay stable whichever
plugin provides the FileSystem backend; the backend is the mechanism."""

import json

from ..contract import (
    ListDirRequest,
    ListDirResult,
    MakeDirRequest,
    MakeDirResult,
    MoveRequest,
    MoveResult,
    ReadFileRequest,
    ReadFileResult,
    RemoveRequest,
    RemoveResult,
    StatRequest,
    StatResult,
    WalkRequest,
    WalkResult,
    WriteFileRequest,
    WriteFileResult,
)
from ..contract.text import one_line
from ..plugins import hookimpl
from ..tooling import OperationArgs, ToolCall, ToolDefinition, ToolRegistrar


class WriteFileArgs(WriteFileRequest, OperationArgs):
    pass


class MakeDirArgs(MakeDirRequest, OperationArgs):
    pass


class MoveArgs(MoveRequest, OperationArgs):
    pass


class RemoveArgs(RemoveRequest, OperationArgs):
    pass


def _request(model: type, args: object) -> object:
    """The backend request without the gateway-only operation_id."""
    return model.model_construct(**{k: getattr(args, k) for k in model.model_fields})


def _render_read(result: ReadFileResult) -> str:
    if result.encoding == "base64":
        return json.dumps(result.model_dump(mode="json"))
    text = result.content
    if result.truncated:
        text += (
            f"\n[truncated: lines {result.start_line}-{result.end_line} of {result.total_lines}; "
            f"call read_file with offset={result.next_offset} to continue]"
        )
    if result.invalid_utf8 is not None:
        text += f"\n[{result.invalid_utf8.count} invalid UTF-8 sequence(s) replaced with U+FFFD]"
    return text


# Listings as text read like `ls -l` / `find` output: what a model reads when a client passes it
# the text block, several times shorter than the same entries as JSON (structured content keeps
# every field).
def _render_list(result: ListDirResult) -> str:
    lines = [f"{one_line(result.path)}: {len(result.entries)} entries" + (" (truncated)" if result.truncated else "")]
    for entry in result.entries:
        name, kind = one_line(entry["name"]), entry["kind"]
        if kind == "directory":
            lines.append(f"dir      {name}/")
        elif kind == "symlink":
            lines.append(f"link     {name} -> {one_line(entry.get('target') or '?')}")
        elif kind == "file":
            size = entry.get("size")
            shown = "withheld" if size is None and entry.get("withheld") else size or 0
            lines.append(f"file {shown:>12}  {name}")
        else:
            lines.append(f"{kind:<8} {name}")
    lines += [f"error    {one_line(e.path)}: {e.message}" for e in result.errors]
    return "\n".join(lines)


def _render_walk(result: WalkResult) -> str:
    lines = [f"{one_line(result.path)}: {len(result.entries)} entries, {result.dirs_visited} directories read"
             + (f" (truncated: {result.truncated_reason or 'a limit was reached'})" if result.truncated else "")]
    for entry in result.entries:
        path, kind = one_line(entry["path"]), entry["kind"]
        suffix = "/" if kind == "directory" else (" @" if kind == "symlink" else "")
        size = entry.get("size")
        lines.append(f"{path}{suffix}" + (f"  {size}" if size is not None else ""))
    lines += [f"error: {one_line(e.path)}: {e.message}" for e in result.errors]
    return "\n".join(lines)


async def read_file(call: ToolCall, args: ReadFileRequest) -> ReadFileResult:
    if args.max_bytes is None:
        args = args.model_copy(update={"max_bytes": call.workspace.limits.max_read_bytes})
    return await call.backends.filesystem().read_file(args)


async def write_file(call: ToolCall, args: WriteFileArgs) -> WriteFileResult:
    return await call.backends.filesystem().write_file(_request(WriteFileRequest, args))


async def list_dir(call: ToolCall, args: ListDirRequest) -> ListDirResult:
    return await call.backends.filesystem().list_dir(args)


async def walk(call: ToolCall, args: WalkRequest) -> WalkResult:
    return await call.backends.filesystem().walk(args)


async def stat(call: ToolCall, args: StatRequest) -> StatResult:
    return await call.backends.filesystem().stat(args)


async def make_dir(call: ToolCall, args: MakeDirArgs) -> MakeDirResult:
    return await call.backends.filesystem().make_dir(_request(MakeDirRequest, args))


async def move(call: ToolCall, args: MoveArgs) -> MoveResult:
    return await call.backends.filesystem().move(_request(MoveRequest, args))


async def remove(call: ToolCall, args: RemoveArgs) -> RemoveResult:
    return await call.backends.filesystem().remove(_request(RemoveRequest, args))


@hookimpl
def codespace_register_tools(register: ToolRegistrar) -> None:
    register(ToolDefinition(
        name="read_file",
        description="Read a text file as a window of lines (offset, limit) with the total line count and the "
        "file's SHA-256; long output is cut at max_bytes with a continuation hint. Invalid UTF-8 is reported "
        "(errors='replace' substitutes it); binary files need encoding='base64'. FIFOs, devices and sockets are "
        "refused.",
        arguments=ReadFileRequest, result=ReadFileResult, handler=read_file, read_only=True,
        paths={"path": "read"}, render=_render_read,
    ))
    register(ToolDefinition(
        name="write_file",
        description="Write a whole file atomically (a crash leaves the old or the new content, never a mix), "
        "keeping an existing file's mode. Pass expected_sha256 from read_file so a change made since you read "
        "it is refused instead of lost; must_not_exist to only create.",
        arguments=WriteFileArgs, result=WriteFileResult, handler=write_file, destructive=True, idempotent=True,
        paths={"path": "write"},
    ))
    register(ToolDefinition(
        name="list_dir",
        description="List one directory, sorted by name, with each entry's kind, size and modification time; "
        "links are shown with their text and never followed.",
        arguments=ListDirRequest, result=ListDirResult, handler=list_dir, read_only=True, paths={"path": "read"},
        render=_render_list,
    ))
    register(ToolDefinition(
        name="walk",
        description="Find files: walk a directory tree (like find) in deterministic order, bounded by depth, directories, entries and "
        "response size (truncated=true says a limit stopped it); filter with gitignore-style include/exclude "
        "globs (search files by name: include=['**/*.py']) and optionally honour .gitignore. Unreadable entries "
        "are listed in errors, not fatal.",
        arguments=WalkRequest, result=WalkResult, handler=walk, read_only=True, paths={"path": "read"},
        render=_render_walk,
    ))
    register(ToolDefinition(
        name="stat",
        description="File metadata (like stat): whether a path exists, its kind, size, mode and times, without "
        "following a final link (unless follow_symlinks).",
        arguments=StatRequest, result=StatResult, handler=stat, read_only=True, paths={"path": "read"},
    ))
    register(ToolDefinition(
        name="make_dir",
        description="Create a directory, like mkdir -p (its parents too unless parents=false).",
        arguments=MakeDirArgs, result=MakeDirResult, handler=make_dir, idempotent=True, paths={"path": "write"},
    ))
    register(ToolDefinition(
        name="move",
        description="Move or rename a file or directory; refuses to replace an existing destination unless "
        "overwrite=true. Links are moved, not followed.",
        arguments=MoveArgs, result=MoveResult, handler=move, destructive=True,
        paths={"source": "write", "destination": "write"},
    ))
    register(ToolDefinition(
        name="remove",
        description="Remove a file, a link (never its target) or, with recursive=true, a directory tree; the "
        "workspace root itself cannot be removed.",
        arguments=RemoveArgs, result=RemoveResult, handler=remove, destructive=True, idempotent=True,
        paths={"path": "write"},
    ))

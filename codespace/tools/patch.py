"""apply_patch: V4A patches through the Patcher backend, every target checked first."""

from pydantic import Field

from ..contract import PatchRequest, PatchResult
from ..contract.gate import split_patch_targets
from ..contract.patches import PatchMode
from ..plugins import hookimpl
from ..tooling import Needs, OperationArgs, ToolCall, ToolDefinition, ToolRegistrar


class ApplyPatchArgs(OperationArgs):
    patch: str = Field(description="The patch: '*** Begin Patch', then Add/Update/Delete File sections, '*** End Patch'.")
    mode: PatchMode = Field(
        default="atomic",
        description="'atomic': nothing changes unless every file succeeds (crash-safe); 'upstream': Codex 0.171.0 "
        "behaviour, sections applied in order and earlier ones kept when a later one fails.",
    )
    dry_run: bool = Field(default=False, description="Return the summary and diffs without changing anything.")


def _needs(args: ApplyPatchArgs, call: ToolCall) -> Needs:
    plan = call.backends.patcher().plan(args.patch, str(call.workspace.root))
    # The rule the patch helper is told too: links are judged where they lead for writes,
    # as themselves for removals.
    removes, writes = split_patch_targets(plan.targets)
    return Needs(write=removes, write_through=writes)


def _render(result: PatchResult) -> str:
    diffs = "".join(f.diff for f in result.files)
    prefix = "" if result.applied else "[dry run: nothing was written]\n"
    return prefix + result.summary + (("\n" + diffs) if diffs else "")


async def apply_patch(call: ToolCall, args: ApplyPatchArgs) -> PatchResult:
    request = PatchRequest(patch=args.patch, mode=args.mode, dry_run=args.dry_run, cwd=str(call.workspace.root))
    call.workspace.ensure_state_dir()
    journal = call.workspace.patch_journal
    return await call.backends.patcher().apply(request, call.backends.filesystem(), journal)


@hookimpl
def codespace_register_tools(register: ToolRegistrar) -> None:
    register(ToolDefinition(
        name="apply_patch",
        description="Apply a Codex-style (V4A) patch: '*** Begin Patch', sections '*** Add File: p' (+ lines), "
        "'*** Delete File: p', '*** Update File: p' (optional '*** Move to: q', then '@@ context' chunks of ' ', "
        "'-', '+' lines), '*** End Patch'. mode='atomic' (default) changes nothing unless every file succeeds; "
        "'upstream' matches Codex 0.171.0 exactly. Returns the upstream summary and a unified diff per file; on "
        "failure, which chunk did not match and the closest lines in the file.",
        arguments=ApplyPatchArgs, result=PatchResult, handler=apply_patch, destructive=True, needs=_needs,
        render=_render,
    ))

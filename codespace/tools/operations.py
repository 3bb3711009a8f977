"""get_operation and list_operations: what the operation store knows."""

import json
from typing import Any, Literal

from pydantic import Field

from ..contract import ToolError
from ..models import Model, Strict
from ..plugins import hookimpl
from ..store import NetworkEvent, OperationRecord
from ..tooling import ToolCall, ToolDefinition, ToolRegistrar

StatusFilter = Literal["running", "succeeded", "failed", "refused", "interrupted", "cancelled"]


class GetOperationArgs(Strict):
    operation_id: str = Field(min_length=1, max_length=200, description="The id a side-effecting call returned.")


class OperationView(Model):
    operation_id: str
    tool: str
    status: StatusFilter
    arguments: dict[str, Any] | str | None = Field(
        description="The call's arguments (paths made absolute); a string of JSON cut short when they were too long."
    )
    result: dict[str, Any] | None = Field(description="Stored structured result or error.")
    error: str | None
    rule: str | None = Field(description="Policy rule that refused the call.")
    client: str | None
    created_at: float = Field(description="Unix time.")
    finished_at: float | None
    network: list[NetworkEvent] = Field(
        default_factory=list, description="Egress-proxy decisions for this command (newest first, at most 50)."
    )


class ListOperationsArgs(Strict):
    limit: int = Field(default=20, ge=1, le=500, description="Most records to return, newest first.")
    status: StatusFilter | None = Field(default=None, description="Only records with this status.")
    tool: str | None = Field(default=None, description="Only records of this tool.")
    before: float | None = Field(default=None, description="Only records created before this Unix time (paging).")


class OperationSummary(Model):
    operation_id: str
    tool: str
    status: StatusFilter
    rule: str | None
    error: str | None
    created_at: float
    finished_at: float | None


class ListOperationsResult(Model):
    operations: list[OperationSummary]
    next_before: float | None = Field(description="Pass as 'before' for the next page; null at the end.")


def _arguments(summary: str | None) -> dict[str, Any] | str | None:
    # Kept as JSON text; shown as an object, since a client that hands the model the structured
    # result as JSON would otherwise show JSON inside a string, every quote escaped.
    if summary is None:
        return None
    try:
        parsed = json.loads(summary)
    except ValueError:
        return summary  # shortened
    return parsed if isinstance(parsed, dict) else summary


def view(record: OperationRecord, network: list[NetworkEvent] | None = None) -> OperationView:
    fields = record.model_dump(include=set(OperationView.model_fields) - {"network"})
    fields["arguments"] = _arguments(record.arguments)
    return OperationView(**fields, network=network or [])


async def get_operation(call: ToolCall, args: GetOperationArgs) -> OperationView:
    record = await call.store.get(args.operation_id)
    if record is None:
        raise ToolError(
            f"no operation {args.operation_id!r} is recorded (it may have been pruned by retention); "
            "list_operations shows what is kept",
            code="not_found",
        )
    return view(record, await call.store.network(limit=50, operation_id=record.operation_id))


async def list_operations(call: ToolCall, args: ListOperationsArgs) -> ListOperationsResult:
    records = await call.store.list(limit=args.limit, status=args.status, tool=args.tool, before=args.before)
    summaries = [OperationSummary(**r.model_dump(include=set(OperationSummary.model_fields))) for r in records]
    next_before = records[-1].created_at if len(records) == args.limit else None
    return ListOperationsResult(operations=summaries, next_before=next_before)


@hookimpl
def codespace_register_tools(register: ToolRegistrar) -> None:
    register(ToolDefinition(
        name="get_operation",
        description="Look up one operation by id: its tool, status (running, succeeded, failed, refused, "
        "interrupted, cancelled), stored result or error, the policy rule if it was refused, and for a command the "
        "egress-proxy decisions it caused. Use it after a lost connection to learn whether a side-effecting call ran.",
        arguments=GetOperationArgs, result=OperationView, handler=get_operation, read_only=True,
    ))
    register(ToolDefinition(
        name="list_operations",
        description="List recorded operations, newest first, optionally filtered by status or tool; page with "
        "'before'. Refusals of any tool are recorded too.",
        arguments=ListOperationsArgs, result=ListOperationsResult, handler=list_operations, read_only=True,
    ))

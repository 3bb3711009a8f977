"""The ``tools/list`` result of a classic protocol version, written as the SDK writes it, without
its models.

The SDK shapes that result twice: through its current protocol models (``mcp_types``), then
through the wire models of the version negotiated (``mcp_types.methods``: every classic version
maps to the 2025-11-25 models, which drop fields that version does not know and order the rest).
Importing those models is most of what a start without a kept listing spends after building the
App (two eras of about 150 models each: 0.15-0.25 s on this machine), and what they do to a
CodeSpace tool is fixed: the fields below, in the order below, nulls left out. So the listing is
written here from the tool definitions and their JSON schemas (``codespace.schemas``).
``tests/test_stdio_listing_versions.py`` compares these bytes with the SDK's, through both of its
model layers, for every classic version and every installed tool: when an SDK release changes
the shape, that test says so.
"""

from __future__ import annotations

import json
from typing import Any

from .wire import HANDSHAKE_PROTOCOL_VERSIONS

# The 2025-11-25 wire models' field order (mcp_types._v2025_11_25: Tool, ToolAnnotations, and
# InputSchema/OutputSchema, whose other keys follow in their own order).
TOOL_FIELDS = ("_meta", "annotations", "description", "execution", "icons", "inputSchema", "name", "outputSchema",
               "title")
ANNOTATION_FIELDS = ("destructiveHint", "idempotentHint", "openWorldHint", "readOnlyHint", "title")
SCHEMA_FIELDS = ("$schema", "properties", "required", "type")
# The classic versions: the handshake's (wire.py, held equal to the SDK's by a test).
CLASSIC_VERSIONS = HANDSHAKE_PROTOCOL_VERSIONS


def _ordered(values: dict[str, Any], fields: tuple[str, ...], *, keep_others: bool) -> dict[str, Any]:
    out = {name: values[name] for name in fields if values.get(name) is not None}
    if keep_others:
        out.update((name, value) for name, value in values.items() if name not in out and name not in fields)
    return out


def _schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """A tool's input or output schema as the wire model keeps it, or None when that model would
    refuse it (not an object schema): the SDK's road then says why."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    return _ordered(schema, SCHEMA_FIELDS, keep_others=True)


def tool_entry(tool: Any) -> dict[str, Any] | None:
    """One tool of the listing, from its definition (codespace.tooling.ToolDefinition)."""
    from ..schemas import input_schema, output_schema

    inputs = _schema(input_schema(tool.arguments))
    outputs = _schema(output_schema(tool.result, side_effects=tool.side_effects))
    if inputs is None or outputs is None:
        return None
    annotations = _ordered({
        "title": tool.title, "readOnlyHint": tool.read_only,
        "destructiveHint": tool.destructive if not tool.read_only else False,
        "idempotentHint": tool.idempotent or tool.read_only, "openWorldHint": tool.open_world,
    }, ANNOTATION_FIELDS, keep_others=False)
    return _ordered({"name": tool.name, "title": tool.title, "description": tool.description,
                     "inputSchema": inputs, "outputSchema": outputs, "annotations": annotations},
                    TOOL_FIELDS, keep_others=False)


def classic_listing(tools: list[Any]) -> bytes | None:
    """The ``result`` of a plain ``tools/list`` on a connection of any classic version (they
    share the wire models), or None when only the SDK's models can tell (a tool they would
    refuse)."""
    entries = []
    for tool in sorted(tools, key=lambda t: t.name):
        entry = tool_entry(tool)
        if entry is None:
            return None
        entries.append(entry)
    return json.dumps({"tools": entries}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def listing_result(tools: list[Any], version: str) -> bytes | None:
    """The same for ``version``: None for a version that is not classic, too."""
    return classic_listing(tools) if version in CLASSIC_VERSIONS else None

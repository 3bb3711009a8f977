"""The JSON Schemas a client is sent for a tool, and the structured results it checks against them.

Clients validate every structured result against the tool's output schema, so both are shaped
to be cheap to validate and to send, without accepting or rejecting anything pydantic's own
schema would not. Tool authors need none of this: :mod:`codespace.tooling` is about tools.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

OPERATION_OUTPUT_FIELDS: dict[str, Any] = {
    "operation_id": {"type": "string", "description": "The operation's id (pass to get_operation)."},
    "replayed": {"type": "boolean", "description": "True when this is the stored result of an earlier run."},
}

_NULL_SENSITIVE = frozenset({"enum", "const", "anyOf", "oneOf", "allOf", "not", "$ref"})


def input_schema(arguments: type[BaseModel]) -> dict[str, Any]:
    """What a tool's arguments must look like, as ``tools/list`` sends it."""
    return lean_schema(arguments.model_json_schema())


def output_schema(result: type[BaseModel], *, side_effects: bool) -> dict[str, Any]:
    """What a tool's structured result looks like; a tool with side effects also reports its
    operation (``OPERATION_OUTPUT_FIELDS``)."""
    schema = _items_described_not_checked(lean_schema(result.model_json_schema()))
    if side_effects:
        schema = dict(schema)
        schema["properties"] = {**schema.get("properties", {}), **OPERATION_OUTPUT_FIELDS}
        schema["required"] = [*schema.get("required", []), *OPERATION_OUTPUT_FIELDS]
    return schema


def structured_result(result: BaseModel) -> dict[str, Any]:
    """The result as the client receives it: optional fields whose default is null are left
    out while they are null ("present only when they apply", as the output schema already
    allows: such fields are not required). Clients validate every result against the output
    schema and pay per property present; three absent nulls save a quarter of that on
    ``read_file``. Required fields stay, null or not."""
    dumped = result.model_dump(mode="json")
    for name in _null_default_fields(type(result)):
        if dumped.get(name, 0) is None:
            del dumped[name]
    return dumped


@functools.cache
def _null_default_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(
        name for name, info in model.model_fields.items()
        if not info.is_required() and info.default is None and info.default_factory is None
    )


def lean_schema(node: Any, defs: dict[str, Any] | None = None) -> Any:
    """The same JSON Schema in a form that is cheaper to validate and to send (clients
    validate every structured result against the output schema): no generated titles,
    ``$ref`` to ``$defs`` inlined where not recursive, and ``anyOf [X, {type: null}]`` as
    X with ``type: [T, null]`` (X's other keywords do not apply to null)."""
    if defs is None and isinstance(node, dict):
        defs = node.get("$defs", {})
    if isinstance(node, list):
        return [lean_schema(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
        name = ref.removeprefix("#/$defs/")
        target = (defs or {}).get(name)
        if target is not None and f'"{ref}"' not in json.dumps(target):  # not recursive
            return lean_schema(target, defs)
    out = {k: lean_schema(v, defs) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        other = options[0] if options[1] == {"type": "null"} else options[1]
        if isinstance(other.get("type"), str) and not _NULL_SENSITIVE & other.keys():
            del out["anyOf"]
            out = {**other, **out, "type": [other["type"], "null"]}
    if isinstance(out.get("$defs"), dict):
        out = _drop_unreferenced_defs(out)
    return out


def _items_described_not_checked(schema: dict[str, Any]) -> dict[str, Any]:
    """Lists of objects (walk and list_dir entries, sessions, ...) keep their item schema under
    ``$defs`` and say so, but their items are not checked: the Python client validates every
    result with ``jsonschema``, which for a 310-entry walk took 13 of its 17 ms with the item
    schema and 1.6 ms with ``items: {type: object}`` (the server builds the items from its own
    models; nothing is lost)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    defs = dict(schema.get("$defs", {}))
    changed = {}
    for name, prop in properties.items():
        items = prop.get("items") if isinstance(prop, dict) else None
        if isinstance(items, dict) and prop.get("type") == "array" and "properties" in items:
            item_name = f"{name}_item"
            defs[item_name] = items
            note = f"Each item: an object as described by $defs/{item_name}."
            description = f"{prop['description']} {note}" if prop.get("description") else note
            changed[name] = {**{k: v for k, v in prop.items() if k != "items"}, "description": description}
    if not changed:
        return schema
    return {**schema, "properties": {**properties, **changed}, "$defs": defs}


def _drop_unreferenced_defs(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema["$defs"]
    text = json.dumps({k: v for k, v in schema.items() if k != "$defs"})
    kept: dict[str, Any] = {}
    while True:
        more = {n: d for n, d in defs.items() if n not in kept and f'"#/$defs/{n}"' in text}
        if not more:
            break
        kept.update(more)
        text = json.dumps(more)
    rest = {k: v for k, v in schema.items() if k != "$defs"}
    return {**rest, "$defs": kept} if kept else rest

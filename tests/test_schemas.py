"""Tool schemas are sent in a leaner form (clients validate every result against them): the
lean form must accept and reject exactly what pydantic's schema does."""

from __future__ import annotations

from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel

from codespace.schemas import lean_schema


class Inner(BaseModel):
    count: int
    label: str = ""


class Node(BaseModel):
    value: int
    child: Node | None = None  # recursive: the reference must stay


class Sample(BaseModel):
    name: str
    inner: Inner | None = None
    kind: Literal["a", "b"] | None = None  # an enum: null must not be merged into its type
    items: list[Inner] = []
    size: int | None = None
    tree: Node | None = None


INSTANCES = [
    {"name": "x"},
    {"name": "x", "inner": None, "kind": None, "size": None},
    {"name": "x", "inner": {"count": 1}, "kind": "a", "size": 3},
    {"name": "x", "inner": {"count": "1"}},
    {"name": "x", "inner": {}},
    {"name": "x", "kind": "c"},
    {"name": "x", "kind": 1},
    {"name": "x", "size": "3"},
    {"name": "x", "items": [{"count": 1}, None]},
    {"name": "x", "items": [{"count": 1, "label": 2}]},
    {"name": "x", "tree": {"value": 1, "child": {"value": 2, "child": None}}},
    {"name": "x", "tree": {"value": 1, "child": {"value": "2"}}},
    {"inner": None},
    None,
]


@pytest.mark.parametrize("instance", INSTANCES, ids=range(len(INSTANCES)))
def test_lean_schema_accepts_and_rejects_exactly_what_the_full_one_does(instance):
    full = Sample.model_json_schema()
    lean = lean_schema(full)
    assert jsonschema.Draft202012Validator(full).is_valid(instance) == jsonschema.Draft202012Validator(lean).is_valid(instance)


def test_lean_schema_inlines_plain_references_and_keeps_recursive_ones():
    lean = lean_schema(Sample.model_json_schema())
    assert lean["properties"]["inner"]["type"] == ["object", "null"]
    assert "anyOf" in lean["properties"]["kind"]  # enum kept apart from null
    assert "Inner" not in lean.get("$defs", {})
    assert "Node" in lean["$defs"]
    assert "title" not in lean


class Listing(BaseModel):
    entries: list[Inner]
    names: list[str] = []


def test_lists_of_objects_keep_their_item_schema_as_documentation_only():
    from codespace.schemas import _items_described_not_checked

    schema = _items_described_not_checked(lean_schema(Listing.model_json_schema()))
    entries = schema["properties"]["entries"]
    assert "items" not in entries and "$defs/entries_item" in entries["description"]
    assert schema["properties"]["names"]["items"] == {"type": "string"}  # scalars stay checked
    item = jsonschema.Draft202012Validator(schema["$defs"]["entries_item"])
    assert item.is_valid({"count": 1}) and not item.is_valid({"label": "x"})
    assert jsonschema.Draft202012Validator(schema).is_valid({"entries": [{"count": 1}], "names": ["a"]})
    assert not jsonschema.Draft202012Validator(schema).is_valid({"entries": {}, "names": ["a"]})


class Reading(BaseModel):
    content: str
    total: int | None  # required, nullable: always sent
    hint: int | None = None  # optional with a null default: sent only when set
    label: str = ""


def test_structured_results_leave_out_only_optional_nulls():
    from codespace.schemas import structured_result

    assert structured_result(Reading(content="x", total=None)) == {"content": "x", "total": None, "label": ""}
    assert structured_result(Reading(content="x", total=3, hint=0)) == {"content": "x", "total": 3, "hint": 0, "label": ""}
    schema = lean_schema(Reading.model_json_schema())
    assert jsonschema.Draft202012Validator(schema).is_valid(structured_result(Reading(content="x", total=None)))

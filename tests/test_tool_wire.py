"""The cold start's ``tools/list`` bytes (codespace.transports.tool_wire) are the SDK's: its
current protocol models, their dump and the wire models of the negotiated version, for every
classic version and every tool installed here (the test plugins' included), and for tool
shapes beyond ours (a title, annotations with a title, schema keys the wire model orders)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from codespace.contract import OperationArgs, ToolDefinition
from codespace.testing import build_app
from codespace.tooling import ToolRegistry
from codespace.transports.listing import sdk_result
from codespace.transports.tool_wire import CLASSIC_VERSIONS, listing_result


@pytest.mark.parametrize("version", CLASSIC_VERSIONS)
def test_every_installed_tool_is_written_as_the_sdk_writes_it(tmp_path, example_plugins, version):
    (tmp_path / "ws").mkdir()
    app = build_app(tmp_path / "ws", state_dir=tmp_path / "state")
    assert "tally" in {tool.name for tool in app.registry}
    assert listing_result(list(app.registry), version) == sdk_result(app.registry, version)


class _Args(BaseModel):
    model_config = {"extra": "forbid", "json_schema_extra": {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                                             "examples": [{"text": "x"}]}}
    text: str = Field(description="Some text with a quote \" and a \\\\ and é and \u2028 and \x01.")
    count: int | None = Field(default=None, ge=0, le=10)
    ratio: float = Field(default=0.5, gt=0.0)


class _OperationArgs(OperationArgs):
    path: str = Field(description="Where.")


class _Result(BaseModel):
    echoed: str
    nested: dict[str, list[int]] = Field(default_factory=dict)


async def _handler(call, args):  # noqa: ANN001, ANN202
    return _Result(echoed=args.text)


SHAPES = {
    "titled": {"title": "Shaped Tool", "read_only": True},
    "hints": {"read_only": True, "destructive": True, "idempotent": False, "open_world": True},
    "side effects": {"arguments": _OperationArgs, "destructive": True, "idempotent": True, "title": "Writes"},
}


@pytest.mark.parametrize("version", CLASSIC_VERSIONS)
@pytest.mark.parametrize("shape", SHAPES)
def test_other_tool_shapes(version, shape):
    registry = ToolRegistry()
    options = {"arguments": _Args, **SHAPES[shape]}
    registry.registrar_for("test")(ToolDefinition(
        name="shaped", description="A tool with more of the optional parts.", result=_Result, handler=_handler,
        **options))
    assert len(registry) == 1, registry.problems
    assert listing_result(list(registry), version) == sdk_result(registry, version)


def test_a_version_it_does_not_know_goes_to_the_sdk(tmp_path):
    registry = ToolRegistry()
    assert listing_result(list(registry), "2026-07-28") is None

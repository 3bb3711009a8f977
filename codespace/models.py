"""Base classes for CodeSpace's pydantic models.

Schemas are built on first use (``defer_build``): most models are not needed to
answer ``initialize``, and building ~80 schemas at import would add tens of
milliseconds to every server start. For the same reason the modules that define
models do not use ``from __future__ import annotations``: pydantic would then turn each
field's annotation back from a string at class creation, which measured 28 ms of every
start (about 70 models, 300 fields).
"""

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class Strict(Model):
    """Unknown fields are errors (a typo must not pass silently), and so is true or false for
    an integer, which lax mode would take as 1 or 0 (found by testing from outside:
    timeout_ms=true killed the command after 1 ms). "30" for 30 stays understood."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None \
                and _takes_an_integer(cls.model_fields[info.field_name].annotation):
            raise ValueError("a boolean is not an integer: give a number")
        return value


def _takes_an_integer(annotation: Any) -> bool:
    if annotation is int:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = get_args(annotation)
        return int in args and bool not in args
    return False

"""Base classes for CodeSpace's pydantic models.

Schemas are built on first use (``defer_build``): most models are not needed to
answer ``initialize``, and building ~80 schemas at import would add tens of
milliseconds to every server start. For the same reason the modules that define
models do not use ``from __future__ import annotations``: pydantic would then turn each
field's annotation back from a string at class creation, which measured 28 ms of every
start (about 70 models, 300 fields).
"""

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class Strict(Model):
    """Unknown fields are errors (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid")

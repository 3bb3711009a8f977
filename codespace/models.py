"""Base classes for CodeSpace's pydantic models.

Schemas are built on first use (``defer_build``): most models are not needed to
answer ``initialize``, and building ~80 schemas at import would add tens of
milliseconds to every server start.
"""

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class Strict(Model):
    """Unknown fields are errors (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid")

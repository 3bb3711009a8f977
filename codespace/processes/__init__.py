"""Process management: the registry of command sessions the server started."""

from .registry import ProcessRegistry

__all__ = ["ProcessRegistry"]

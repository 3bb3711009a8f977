"""CodeSpace: a governed workspace for coding agents, served over MCP."""

from typing import Any

__version__ = "0.1.2"

__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> Any:
    # ``hookimpl`` lives in codespace.plugins (pluggy, entry points: ~0.1 s); loaded when a
    # plugin asks for it, not by every ``import codespace`` on the server's start path.
    if name == "hookimpl":
        from .plugins import hookimpl

        return hookimpl
    raise AttributeError(f"module 'codespace' has no attribute {name!r}")

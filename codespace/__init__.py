"""CodeSpace: a governed workspace for coding agents, served over MCP."""

__version__ = "0.1.2"

from .plugins import hookimpl  # noqa: E402

__all__ = ["__version__", "hookimpl"]

"""CodeSpace: a governed workspace for coding agents, served over MCP."""

__version__ = "0.2.0"

__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> object:
    # ``hookimpl`` lives in codespace.plugins (pluggy, entry points: ~0.1 s); loaded when a
    # plugin asks for it, not by every ``import codespace`` on the server's start path.
    if name == "hookimpl":
        from .plugins import hookimpl

        return hookimpl
    raise AttributeError(f"module 'codespace' has no attribute {name!r}")

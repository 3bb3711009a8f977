"""CodeSpace: a governed workspace for coding agents, served over MCP."""

__version__ = "0.2.7"

__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> object:
    # ``hookimpl`` is pluggy's mark without pluggy (codespace.contract.markers): loading a
    # plugin module, as a one-shot helper does, need not load the plugin machinery.
    if name == "hookimpl":
        from .contract.markers import hookimpl

        return hookimpl
    raise AttributeError(f"module 'codespace' has no attribute {name!r}")

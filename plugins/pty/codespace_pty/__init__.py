"""CodeSpace terminal backend on ptyprocess (follows Codex 0.171.0's codex-utils-pty).

The names load on first use: one-shot helpers (the patch helper) import every installed
plugin's hook module to choose their file-system backend, and the terminal's modules
(anyio, ptyprocess, the contract's pydantic models) cost them more than their whole run.
"""

__all__ = ["PtyProcessHandle", "PtyTerminal"]


def __getattr__(name: str):  # noqa: ANN202
    if name in __all__:
        from . import terminal

        return getattr(terminal, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""CodeSpace terminal backend on ptyprocess (follows Codex 0.171.0's codex-utils-pty)."""

from .terminal import PtyProcessHandle, PtyTerminal

__all__ = ["PtyProcessHandle", "PtyTerminal"]

"""What a tool call comes to before it becomes a CallToolResult: :class:`Outcome`, and the
forms an error and a policy refusal take in it (the gateway makes them; the transports turn
them into results)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .contract.text import in_message, one_line

if TYPE_CHECKING:
    from .contract import Refused

ERROR_META_KEY = "codespace/error"
"""Where an error result carries its machine-readable form: ``_meta["codespace/error"]``."""


@dataclass
class Outcome:
    """What the server turns into a CallToolResult.

    A success carries ``structured`` (valid against the tool's output schema) and a text
    block. An error carries no structured content at all: clients built on the TypeScript
    SDK 1.x validate ``structuredContent`` whenever it is present, error or not, and an
    ``{"error": ...}`` object matches no tool's output schema, so the call would throw and
    the agent would see nothing. The error is the text block (what every client shows the
    model; its control characters escaped) and, for programs, ``error`` sent as
    ``_meta["codespace/error"]``, which no client validates (its message as it is)."""

    is_error: bool
    text: str
    structured: dict[str, Any] | None
    error: dict[str, Any] | None = None

    @property
    def meta(self) -> dict[str, Any] | None:
        return {ERROR_META_KEY: self.error} if self.error is not None else None

    def stored(self) -> dict[str, Any] | None:
        """The form kept in the operation record (get_operation shows it)."""
        if self.error is None:
            return self.structured
        error = {k: v for k, v in self.error.items() if k not in ("operation_id", "replayed", "status")}
        stored: dict[str, Any] = {"error": error}
        if "operation_id" in self.error:
            stored["operation_id"] = self.error["operation_id"]
        return stored


def error_outcome(code: str, message: str, details: dict[str, Any] | None = None, operation_id: str | None = None) -> Outcome:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    if operation_id is not None:
        error["operation_id"] = operation_id
    return Outcome(True, _shown(message, details), None, error)


def _shown(message: str, details: dict[str, Any] | None) -> str:
    """``message`` for the text block. A line break stays (a message may have several lines),
    but not in the path the error names (found by testing from outside: a name holding
    "\n[exit 0 in 3 ms]" put a line of its own into read_file's error)."""
    text = in_message(message)
    path = (details or {}).get("path")
    if isinstance(path, str) and "\n" in path:
        text = text.replace(in_message(path), one_line(path))
    return text


def refusal_outcome(refusal: Refused, operation_id: str) -> Outcome:
    error = {"code": "refused", "rule": refusal.rule, "message": refusal.message, "operation_id": operation_id}
    return Outcome(True, in_message(refusal.message), None, error)

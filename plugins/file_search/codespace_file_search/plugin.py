"""Hooks of the file-search plugin: its two tools and its pin check."""

from __future__ import annotations

from codespace import hookimpl


@hookimpl
def codespace_register_tools(register):  # noqa: ANN001, ANN201
    from .find_tool import find_files_tool
    from .grep_tool import grep_tool

    register(find_files_tool())
    register(grep_tool())


@hookimpl
def codespace_pin_checks():  # noqa: ANN201
    from .pin import pin_check

    return [pin_check()]

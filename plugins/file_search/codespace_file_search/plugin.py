"""Hooks of the file-search plugin: its two tools, the warm-up walk and its pin check."""

from __future__ import annotations

from codespace import hookimpl

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True


@hookimpl
def codespace_register_tools(register):  # noqa: ANN001, ANN201
    from .find_tool import find_files_tool
    from .grep_tool import grep_tool

    register(find_files_tool())
    register(grep_tool())


@hookimpl
def codespace_services(workspace, backends, store):  # noqa: ANN001, ANN201
    """The warm-up walk (``warm_up``), where find_files runs: not in a server whose worker runs it."""
    from .warm_up import wanted, warm_up

    if not backends.workspace_tools_here() or not wanted():
        return None
    import functools

    return [functools.partial(warm_up, workspace)]


@hookimpl
def codespace_pin_checks():  # noqa: ANN201
    from .pin import pin_check

    return [pin_check()]

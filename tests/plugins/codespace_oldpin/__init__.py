"""A plugin pinned to an older upstream release (for `codespace pins`)."""

from codespace import hookimpl


@hookimpl
def codespace_doctor(workspace):
    return []

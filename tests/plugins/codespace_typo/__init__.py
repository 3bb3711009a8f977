"""A plugin whose hook name is misspelled: it must be reported, not silently ignored."""

from codespace import hookimpl


@hookimpl
def codespace_filesytem(workspace):  # sic
    return None

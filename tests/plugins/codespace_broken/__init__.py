"""A plugin that fails to import, as a broken third-party plugin would."""

raise ImportError("codespace_broken needs a library that is not installed (test plugin)")

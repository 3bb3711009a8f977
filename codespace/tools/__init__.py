"""Built-in tools, registered through the same ``codespace_register_tools`` hook as plugin tools."""

"""Conformance against the pinned upstream release: the upstream fixtures, the
released binary as an oracle, and a differential fuzz run. Used by
``pin_check.py`` and by the plugin's tests; not part of the installed package."""

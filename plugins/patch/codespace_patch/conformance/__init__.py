"""Conformance against the pinned upstream release: the upstream fixtures, the
released binary as an oracle, and a differential fuzz run. Used by the plugin's pin
check (``codespace pins check``, ``pin_check.py``), its tests and the benchmark; it
ships in the package so the check runs from an installed plugin."""

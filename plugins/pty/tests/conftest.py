from __future__ import annotations

import pytest


# ws, state, make_app, mcp_client, ... come from codespace.testing, a pytest plugin.
@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("pty",)

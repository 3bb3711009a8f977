import pytest


@pytest.fixture
def enabled_plugins():
    """Every app a test builds loads this plugin alone with the core (CI's isolated run)."""
    return ("file_search",)

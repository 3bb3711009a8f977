import sys

import pytest


@pytest.fixture
def enabled_plugins():
    """Every app a test builds loads this plugin alone with the core (CI's isolated run)."""
    return ("file_search",)


def running_code_names() -> set[tuple[str, str]]:
    """(file name, function) of every frame of every thread now: to tell which walk runs."""
    found = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            found.add((frame.f_code.co_filename, frame.f_code.co_name))
            frame = frame.f_back
    return found

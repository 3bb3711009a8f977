"""Which side of the socket this process is: the server (forwarding to a worker) or the worker.

Its own module, not a flag in ``plugin.py``: the worker's entry (``runner``) sets it, and the
hooks read it, so neither imports the other."""

from __future__ import annotations

_in_worker = False


def mark_worker_process() -> None:
    """Called by the worker's entry: this process performs the side effects itself."""
    global _in_worker
    _in_worker = True


def in_worker_process() -> bool:
    return _in_worker

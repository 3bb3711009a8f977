"""Run blocking work on a thread so that cancelling the call really stops it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


async def run_cancellable(fn: Callable[[threading.Event], T]) -> T:
    """Run ``fn(cancel)`` on a worker thread.

    When the calling task is cancelled (the client cancelled the request, or the
    server is shutting down), ``cancel`` is set and the caller waits, shielded,
    until ``fn`` has returned: the work has stopped before the cancellation is
    reported, instead of running on unseen. ``fn`` should poll ``cancel.is_set()``
    between units of work.
    """
    cancel = threading.Event()
    done = threading.Event()

    def body() -> T:
        try:
            return fn(cancel)
        finally:
            done.set()

    try:
        return await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        cancel.set()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(done.wait)
        raise

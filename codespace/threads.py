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
    between units of work and raise when it stops early.

    If ``fn`` finished its work all the same (the cancel came after its last check),
    its result is returned, not the cancellation: the change was made, and the
    caller must be able to record that. The caller's scope stays cancelled, so its
    next checkpoint raises. A cancel that arrives before ``fn`` started means it
    never starts.
    """
    cancel = threading.Event()
    done = threading.Event()
    lock = threading.Lock()
    state = {"started": False}
    outcome: list[T] = []

    def body() -> T:
        with lock:
            if cancel.is_set():
                raise _NotStarted
            state["started"] = True
        try:
            value = fn(cancel)
            outcome.append(value)
            return value
        finally:
            done.set()

    try:
        return await anyio.to_thread.run_sync(body, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with lock:
            cancel.set()
            started = state["started"]
        if started:  # else it never will: waiting for it would wait forever
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait)
        if outcome:
            return outcome[0]
        raise


class _NotStarted(Exception):
    """Raised on the worker thread of a call cancelled before its work began (nobody sees it)."""

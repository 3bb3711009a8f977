"""Run blocking work on a thread so that cancelling the call really stops it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


class CancelToken(threading.Event):
    """What ``run_cancellable`` hands its function: set when the call is cancelled.

    A function that changes something calls :meth:`commit` at its point of no return
    (just before the rename, say): from there on it finishes its work even when the
    token is set, and its result is reported as the outcome, not the cancellation,
    so that the caller's record says the change was made."""

    committed = False

    def commit(self) -> None:
        self.committed = True


async def run_cancellable(fn: Callable[[CancelToken], T]) -> T:
    """Run ``fn(cancel)`` on a worker thread.

    When the calling task is cancelled (the client cancelled the request, or the
    server is shutting down), ``cancel`` is set and the caller waits, shielded,
    until ``fn`` has returned: the work has stopped before the cancellation is
    reported, instead of running on unseen. ``fn`` should poll ``cancel.is_set()``
    between units of work. The cancellation is what the caller sees, unless ``fn``
    had passed its point of no return (:meth:`CancelToken.commit`) and returned: then
    its result is (the caller's scope stays cancelled; its next checkpoint raises).
    A cancel that arrives before ``fn`` started means it never starts.
    """
    cancel = CancelToken()
    done = threading.Event()
    lock = threading.Lock()
    started = False
    outcome: list[T] = []

    def body() -> T:
        nonlocal started
        with lock:
            if cancel.is_set():
                raise _NotStarted
            started = True
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
            running = started
        if running:  # else it never will: waiting for it would wait forever
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait)
        if outcome and cancel.committed:
            return outcome[0]
        raise


class _NotStarted(Exception):
    """Raised on the worker thread of a call cancelled before its work began (nobody sees it)."""

"""One call to the worker as a backend makes it: a backend error comes back as the exception the
worker raised; a refusal of the protocol itself as ``RunnerLost`` (nothing ran) or a ToolError."""

from __future__ import annotations

from .client import WorkerCallError
from .errors_wire import WIRE_KEY, exception_from_wire
from .lifecycle import Worker


async def call_worker(worker: Worker, method: str, params: dict, what: str) -> dict:
    try:
        return await worker.call(method, params, what)
    except WorkerCallError as exc:
        wire = exc.data.get(WIRE_KEY)
        if isinstance(wire, dict):
            raise exception_from_wire(wire) from None
        # The protocol's own refusal (unknown method, bad params, busy): a mismatch between the
        # two sides, not the agent's request. Nothing ran unless the worker says it may have.
        from codespace.contract import RunnerLost, ToolError

        if not exc.dispatched:
            raise RunnerLost(f"the worker refused {what}: {exc.message}", dispatched=False,
                             details={"worker_code": exc.code}) from None
        raise ToolError(f"the worker failed {what}: {exc.message}", code="worker_error",
                        details={"worker_code": exc.code}) from None

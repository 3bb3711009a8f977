"""What a terminal session shows through our Terminal backend, driven as the core drives it.

The core spawns a :class:`~codespace.contract.CommandSpec` with ``tty`` set, reads the
handle until it returns ``b""`` (every writer closed the terminal), writes typed
bytes in order, resizes on request, and reports the exit status the agent sees: the
code, or 128+N with the signal's name when signal N ended the command.
"""

from __future__ import annotations

import tempfile
import time

import anyio

from codespace.contract import CommandSpec, Terminal

from .pin_cases import Case
from .pin_upstream import ENV, STEP_TIMEOUT_S, Seen


def shown_exit_code(status: int) -> int:
    """The exit code the core reports for a wait status (-N: signal N)."""
    return 128 - status if status < 0 else status


async def _run(terminal: Terminal, case: Case, cwd: str) -> Seen:
    seen = Seen()
    rows, cols = case.size or (24, 80)
    handle = await terminal.spawn(CommandSpec(argv=case.argv, cwd=cwd, env=dict(ENV), tty=True,
                                              rows=rows, cols=cols, interactive=True))
    ended = anyio.Event()

    async def pump() -> None:
        while True:
            data = await handle.read()
            if not data:
                break
            seen.output += data
            seen.chunks.append(len(data))
        ended.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            for number, step in enumerate(case.steps):
                if step.resize is not None:
                    handle.resize(*step.resize)
                start = len(seen.output)
                if step.write:
                    await handle.write(step.write)
                deadline = time.monotonic() + STEP_TIMEOUT_S
                while step.wait_for and step.wait_for not in seen.output[start:] and not ended.is_set():
                    if time.monotonic() > deadline:
                        seen.problem = f"step {number}: {step.wait_for!r} never appeared"
                        break
                    await anyio.sleep(0.02)
            with anyio.move_on_after(STEP_TIMEOUT_S * 2) as scope:
                await ended.wait()
            if scope.cancelled_caught:
                seen.problem = "did not end within the step timeout"
                handle.signal_group(9)
                await ended.wait()
        seen.exit_code = shown_exit_code(await handle.wait())
    finally:
        handle.close()
    return seen


def run_ours(terminal: Terminal, case: Case) -> Seen:
    with tempfile.TemporaryDirectory(prefix="codespace-pty-pin-") as cwd:
        return anyio.run(_run, terminal, case, cwd)

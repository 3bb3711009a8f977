"""The end of a lossless stream: what a command wrote before it exited is never cut off, neither
by the drain's grace period when the pump that reads the pipe is slow to run (a loaded machine),
nor by stderr ending while stdout, merged into the same buffer, still has bytes in its pipe.

Real processes on real pipes; the only instrument is a delay put in front of the pump's reads,
standing for an event loop that is busy elsewhere."""

from __future__ import annotations

import os
import sys
import time

import anyio
import pytest

from codespace.contract import CommandSpec
from codespace.processes import session as session_module
from codespace.processes.buffer import OutputBuffer
from codespace.processes.session import Session
from codespace.processes.spawn import PipeProcess

pytestmark = pytest.mark.anyio

CAPACITY = 64 * 1024
GRACE_S = 0.4
PUMP_STALL_S = 0.25


def _writer(size: int) -> CommandSpec:
    return CommandSpec(argv=[sys.executable, "-c", f"import sys; sys.stdout.buffer.write(b'x' * {size})"],
                       cwd=os.getcwd(), env=dict(os.environ))


def _stalled(read):  # noqa: ANN001, ANN202
    async def slow() -> bytes:
        await anyio.sleep(PUMP_STALL_S)
        return await read()
    return slow


def _session(spec: CommandSpec, *, stall_stdout: bool) -> Session:
    """A lossless session with stdout and stderr merged into one buffer, as exec makes it."""
    process = PipeProcess.spawn(spec)
    out = OutputBuffer(CAPACITY, lossless=True)
    stdout = lambda: process.read("stdout")  # noqa: E731
    return Session(id="s-drain", process=process, argv=spec.argv, tty=False, interactive=False,
                   operation_id=None, out=out, err=None,
                   readers=[(out, _stalled(stdout) if stall_stdout else stdout),
                            (out, lambda: process.read("stderr"))])


async def _received_after_a_full_exit(late_s: float) -> tuple[int, int]:
    """Run a writer that exits with the buffer full and the rest of its output in the pipe;
    wait ``late_s`` after that, then read to the end: (bytes written, bytes received)."""
    size = CAPACITY + 48 * 1024  # the buffer's fill, and less than a pipe holds: the writer can exit
    session = _session(_writer(size), stall_stdout=True)
    received = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        with anyio.fail_after(30):
            await session.exited.wait()
            while session.out.has_room():
                await anyio.sleep(0.01)
            await anyio.sleep(late_s)
            while not session.finished.is_set() or session.has_unread():
                received += len(session.take(CAPACITY).text.encode())
                await anyio.sleep(0.01)
    return size, received


async def test_a_take_just_before_the_grace_ends_still_gets_the_rest(monkeypatch):
    """The client frees room shortly before the grace period ends, and the pump only reads
    again after it has ended: the bytes still in the pipe must arrive, not be cut off."""
    monkeypatch.setattr(session_module, "DRAIN_AFTER_EXIT_S", GRACE_S)
    size, received = await _received_after_a_full_exit(GRACE_S - 0.1)
    assert received == size, f"{size - received} of the {size} bytes the command wrote were lost at the end"


async def test_stderr_ending_first_does_not_end_the_stdout_it_shares_a_buffer_with():
    """stdout and stderr merged into one buffer: stderr reaches its end while stdout's pump
    has yet to read the rest of the pipe. The buffer ends with its last stream, not its first."""
    size, received = await _received_after_a_full_exit(0)
    assert received == size, f"{size - received} of the {size} bytes the command wrote were lost at the end"


async def test_a_grandchild_holding_the_pipe_open_ends_with_the_grace_period(monkeypatch):
    """The grace period still ends a session whose pipe a grandchild keeps open without
    writing: the session finishes within the grace period of the leader's exit."""
    monkeypatch.setattr(session_module, "DRAIN_AFTER_EXIT_S", GRACE_S)
    session = _session(CommandSpec(argv=["sh", "-c", "echo hi; (exec sleep 30) &"], cwd=os.getcwd(),
                                   env=dict(os.environ)), stall_stdout=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        with anyio.fail_after(30):
            await session.exited.wait()
            exited = time.monotonic()
            await session.finished.wait()
    assert time.monotonic() - exited < GRACE_S + 1.0
    assert session.take(CAPACITY).text == "hi\n"
    session.kill(9)


def test_every_cursor_and_window_over_a_cut_head_moves_on_and_accounts_for_every_byte():
    """Found by testing from outside: a character cut at the head's end held the cursor there.
    From every cursor a reader could hold, with every window size, reading on reaches the end,
    shows no U+FFFD for a cut character and accounts for each byte once."""
    from codespace.processes.buffer import take_text

    for text in ("€" * 10, "é😀€a" * 4, "a" * 7 + "😀" * 6):
        data = text.encode()
        for capacity in range(8, 20):
            buffer = OutputBuffer(capacity)
            buffer.append(data)
            buffer.close()
            boundaries = {i for i in range(len(data) + 1) if i == len(data) or data[i] & 0xC0 != 0x80}
            for width in range(1, 12):
                cursor, shown, dropped, reads = 0, "", 0, 0
                while cursor < len(data):
                    part, start, end, lost = take_text(buffer, cursor, width)
                    assert end > cursor, (text, capacity, width, cursor)
                    shown, dropped, cursor, reads = shown + part, dropped + lost, end, reads + 1
                    assert end in boundaries or end == len(buffer._head), (end, capacity)
                kept = shown.replace("\ufffd", "?")
                assert "?" not in kept, (text, capacity, width, shown)
                body = "".join(p.split(" bytes omitted ...\n")[-1] for p in kept.split("... "))
                assert len(body.encode()) + dropped == len(data), (text, capacity, width, shown, dropped)


def test_a_tail_still_being_written_after_the_gap_moves_the_cursor_past_the_gap():
    """The middle was dropped and the tail so far ends inside a character: the read tells of
    the gap and moves past it, and the character comes whole with the next read."""
    from codespace.processes.buffer import take_text

    buffer = OutputBuffer(8)  # a head of 4 bytes and a tail of 4
    buffer.append(("€" * 5 + "x").encode())  # 16 bytes: the head keeps 4, the tail bytes 12-15
    buffer.append("€".encode()[:2])  # the tail is now bytes 14-17: '€'[2], 'x', '€'[:2]
    text, start, end, dropped = take_text(buffer, 0, 100)
    assert (text, end, dropped) == ("€... 12 bytes omitted ...\nx", 16, 12), (text, end, dropped)
    buffer.append("€".encode()[2:])
    assert take_text(buffer, end, 100)[0] == "€"


async def test_an_answer_that_reports_the_exit_holds_the_output_written_before_it():
    """An interactive wait that goes quiet after the command exited, while its last output is
    still in the pipe (a busy loop has yet to run the pump): the answer says how the command
    ended, so it must hold everything the command wrote, not a first line (found in CI: `top`
    on a terminal answered with exit code 0 and one line of its output)."""
    spec = CommandSpec(argv=[sys.executable, "-c", "import sys, time; print('first', flush=True); "
                             "time.sleep(0.3); print('rest'); sys.exit(3)"], cwd=os.getcwd(), env=dict(os.environ))
    process = PipeProcess.spawn(spec)
    out = OutputBuffer(CAPACITY, lossless=False)
    reads = 0

    async def late_after_the_first() -> bytes:
        nonlocal reads
        reads += 1
        if reads > 1:
            await anyio.sleep(1.0)  # the pump runs again only after the quiet period has passed
        return await process.read("stdout")

    session = Session(id="s-quiet", process=process, argv=spec.argv, tty=False, interactive=True,
                      operation_id=None, out=out, err=None,
                      readers=[(out, late_after_the_first), (out, lambda: process.read("stderr"))])
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        with anyio.fail_after(30):
            await session.wait_for(deadline=time.monotonic() + 10, quiet_s=0.5, baseline=0)
            text, status = session.take(CAPACITY).text, session.status()
            await session.finished.wait()
    assert status["running"] is False and status["exit_code"] == 3
    assert text == "first\nrest\n", f"the answer reporting exit code 3 held only {text!r}"

"""How the fast lane waits (``runtime.lane_spin_us``): polled for a bounded time, never more.

What must hold: the worker polls for the next request only while reads come close together and
stops after the window; a spaced-out read costs it no poll; the connection is answered while a
lane polls; the server's side polls at most the fast wait and still gets a slow answer; the
answers are the same whether either side polls or sleeps. CPU is read from the kernel's own
per-thread accounting (``/proc/<pid>/task/*/schedstat``, nanoseconds), which a same-uid reader
may read of the non-dumpable worker."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import threading
import time

import pytest

from codespace_runtime.framing import encode_frame
from codespace_runtime.lane_client import FAST_WAIT_S, Lane
from codespace_runtime.lane_frames import read_frame

from .conftest import runner_client, start_runner_worker, stop_worker

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]

WINDOW_US = 10_000  # the policy's maximum: a poll this long stands out from a read's own CPU


def _cpu_s(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far, in seconds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total / 1e9


def _quiet_worker(tmp_path, monkeypatch, spin_us: int):
    """A runner worker with no start-up work of its own left to do once it is measured (the
    file search's warm-up walk would be another thread's CPU)."""
    monkeypatch.setenv("CODESPACE_FIND_FILES_WARM_UP", "off")
    return start_runner_worker(tmp_path, f"[runtime]\nlane_spin_us = {spin_us}\n")


async def _idle_cpu_s(pid: int, seconds: float) -> float:
    before = _cpu_s(pid)
    await asyncio.sleep(seconds)
    return _cpu_s(pid) - before


@pytest.fixture
def spinning_worker(tmp_path, monkeypatch):
    worker = _quiet_worker(tmp_path, monkeypatch, WINDOW_US)
    yield worker
    stop_worker(worker)


async def test_the_worker_polls_after_a_burst_once_and_not_after_spaced_reads(spinning_worker):
    pid, ws = spinning_worker.proc.pid, str(spinning_worker.workspace)
    client = await runner_client(spinning_worker)
    try:
        stat = {"path": f"{ws}/ok.txt"}
        assert (await client.call_fast("fs.stat", stat))["kind"] == "file"  # the lane is open
        await asyncio.sleep(1.0)  # the worker's services have started
        quiet = await _idle_cpu_s(pid, 0.3)
        # A burst: each read comes right after the answer before it, so the worker polls, and
        # once the burst ends it polls one window more, then sleeps.
        for _ in range(20):
            assert (await client.call_fast("fs.stat", stat))["kind"] == "file"
        after_burst = await _idle_cpu_s(pid, 0.3) - quiet
        # Spaced reads (50 ms apart, five windows): the worker sleeps between them.
        before = _cpu_s(pid)
        for _ in range(10):
            assert (await client.call_fast("fs.stat", stat))["kind"] == "file"
            await asyncio.sleep(0.05)
        spaced = _cpu_s(pid) - before - quiet * 0.5 / 0.3
    finally:
        await client.close()
    window = WINDOW_US / 1e6
    print(f"worker CPU: quiet {quiet * 1000:.2f} ms, after the burst +{after_burst * 1000:.2f} ms, "
          f"ten spaced reads +{spaced * 1000:.2f} ms")
    assert window * 0.3 <= after_burst <= window * 4, (
        f"after a burst the worker used {after_burst * 1000:.1f} ms of CPU; one poll of the window is "
        f"{window * 1000:.0f} ms")
    # One poll at most (after the first of them, which followed the burst's), plus ten reads.
    assert spaced < window * 4, (f"ten reads 50 ms apart cost the worker {spaced * 1000:.1f} ms of CPU: "
                                 "it polled after reads that did not come close together")


async def test_no_poll_at_all_with_lane_spin_us_0(tmp_path, monkeypatch):
    worker = _quiet_worker(tmp_path, monkeypatch, 0)
    client = await runner_client(worker)
    try:
        stat = {"path": f"{worker.workspace}/ok.txt"}
        assert (await client.call_fast("fs.stat", stat))["kind"] == "file"
        await asyncio.sleep(1.0)
        quiet = await _idle_cpu_s(worker.proc.pid, 0.3)
        for _ in range(20):
            assert (await client.call_fast("fs.stat", stat))["kind"] == "file"
        idle = await _idle_cpu_s(worker.proc.pid, 0.3) - quiet
    finally:
        await client.close()
        stop_worker(worker)
    assert idle < 0.003, f"with lane_spin_us = 0 the idle worker used {idle * 1000:.1f} ms more CPU after a burst"


async def test_the_connection_is_answered_while_a_lane_polls(spinning_worker):
    # The lane's thread polls holding the interpreter between polls; the connection's loop must
    # still get in (each poll releases the interpreter's lock).
    ws = str(spinning_worker.workspace)
    client = await runner_client(spinning_worker)
    try:
        pings = []
        for _ in range(20):
            for _ in range(3):
                await client.call_fast("fs.stat", {"path": f"{ws}/ok.txt"})
            start = time.perf_counter()
            assert (await client.call("ping", {}))[0] == {"pong": True}
            pings.append(time.perf_counter() - start)
    finally:
        await client.close()
    pings.sort()
    assert pings[len(pings) // 2] < WINDOW_US / 1e6 / 2, (
        f"a ping during the lane's poll took {pings[len(pings) // 2] * 1000:.1f} ms (median): the lane starves "
        "the connection")


def _answer_after(peer: socket.socket, delay_s: float) -> threading.Thread:
    def serve() -> None:
        request = read_frame(peer)
        time.sleep(delay_s)
        peer.sendall(encode_frame({"id": request["id"], "result": {"kind": "file"}}))

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


@pytest.mark.parametrize("spin_s", [0.0, 0.0005, FAST_WAIT_S, 1.0])
async def test_the_server_side_polls_at_most_the_fast_wait_and_still_gets_a_slow_answer(spin_s):
    ours, peer = socket.socketpair()
    lane = Lane(ours, frozenset({"fs.stat"}), spin_s)
    assert lane.spin_s == min(spin_s, FAST_WAIT_S)
    try:
        for delay in (0.0, 0.02):  # at once, and well past the fast wait (then awaited on the loop)
            answering = _answer_after(peer, delay)
            ticks = 0

            async def tick() -> None:  # the loop runs while a slow answer is awaited
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0)
            start_ticks = ticks
            started = time.perf_counter()
            assert (await lane.call("fs.stat", {"path": "/x"}))["result"] == {"kind": "file"}
            elapsed = time.perf_counter() - started
            ticker.cancel()
            answering.join()
            if delay:
                assert elapsed >= delay and ticks - start_ticks >= 3, "the loop was held while the answer was late"
    finally:
        lane.close()
        peer.close()

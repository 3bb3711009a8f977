"""The fast lane (lane_service, lane_client) against a real runner worker on its socket.

What must hold: a lane answers exactly what the connection answers (the same handlers, the same
judging of every path), serves nothing but its read-only methods, survives bad frames as the
connection does, and a lane that breaks (cancelled, worker gone, closed) never loses a call: it
goes on the connection instead."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import time

import pytest

from codespace_runtime import lane_client
from codespace_runtime import protocol as p
from codespace_runtime.client import WorkerCallError, WorkerGone
from codespace_runtime.framing import encode_frame
from codespace_runtime.lane_client import Lane, LaneLost
from codespace_runtime.lane_frames import read_frame
from codespace_runtime.lane_service import LANE_METHODS, MAX_LANES

from .conftest import runner_client as _client, runner_refusal as _refusal

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]


async def _raw_lane(client) -> socket.socket:
    """A lane this test speaks to frame by frame (blocking, with a timeout)."""
    ours, theirs = socket.socketpair()
    try:
        result, _ = await client.call("lane.open", {}, [theirs.fileno()])
    finally:
        theirs.close()
    assert result == {"methods": sorted(LANE_METHODS)}
    ours.settimeout(10)
    return ours


def _ask(sock: socket.socket, frame: dict) -> dict:
    sock.sendall(encode_frame(frame))
    return read_frame(sock)


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


async def test_the_lane_answers_what_the_connection_answers(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        for method, params in [("fs.read_file", {"path": f"{ws}/ok.txt"}),
                               ("fs.read_file", {"path": f"{ws}/vendor/lib.txt", "start_line": 1}),
                               ("fs.stat", {"path": f"{ws}/ok.txt"}), ("fs.stat", {"path": f"{ws}/secret-not"})]:
            try:
                by_connection = (await client.call(method, params))[0]
            except WorkerCallError as exc:
                by_connection = (exc.code, exc.message, exc.dispatched, exc.data)
            try:
                by_lane = await client.call_fast(method, params)
                assert by_lane is not None, "the lane did not carry the call"
            except WorkerCallError as exc:
                by_lane = (exc.code, exc.message, exc.dispatched, exc.data)
            assert by_lane == by_connection, (method, params)
        assert client._lane is not None and not client._lane.closed
        # Not a lane method: never sent there (the connection carries it).
        assert await client.call_fast("fs.write_file", {"path": f"{ws}/w.txt", "content": "x"}) is None
        assert not (runner_worker.workspace / "w.txt").exists()
    finally:
        await client.close()


async def test_the_lane_judges_every_path_as_the_connection_does(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        for path, rule in [(f"{ws}/secret/key.txt", "filesystem.paths['secret']"), ("ok.txt", "path syntax"),
                           (f"{ws}/../ws/secret/key.txt", "path syntax"), (f"{ws}/ok\x00.txt", "path syntax")]:
            for method in ("fs.read_file", "fs.stat"):
                on_connection = await _refusal(client, method, {"path": path})
                with pytest.raises(WorkerCallError) as caught:
                    await client.call_fast(method, {"path": path})
                on_lane = caught.value
                assert (on_lane.code, on_lane.message, on_lane.dispatched, on_lane.data) == (
                    on_connection.code, on_connection.message, on_connection.dispatched, on_connection.data)
                assert on_lane.code == "refused" and on_lane.dispatched is False
                assert on_lane.data["exception"]["rule"] == rule
        assert "k\n" not in repr(on_lane.data)
    finally:
        await client.close()


async def test_the_lane_serves_only_its_methods_and_survives_bad_frames(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        lane = await _raw_lane(client)
        for method, params in [("fs.write_file", {"path": f"{ws}/evil.txt", "content": "x"}),
                               ("fs.remove", {"path": f"{ws}/ok.txt"}), ("patch.apply", {"patch": "", "cwd": ws}),
                               ("proc.exec", {"args": {"command": ["true"]}}), ("lane.open", {}), ("shutdown", {})]:
            answer = _ask(lane, {"id": 7, "method": method, "params": params})
            assert answer["id"] == 7 and answer["error"]["code"] == p.UNKNOWN_METHOD, answer
            assert answer["error"]["dispatched"] is False
            assert "fs.read_file" in answer["error"]["message"] and "on the connection" in answer["error"]["message"]
        assert not (runner_worker.workspace / "evil.txt").exists() and (runner_worker.workspace / "ok.txt").exists()

        # Garbage, a lone surrogate, a request without an id, a list: answered, the lane goes on.
        for body in (b"{not json", b'{"id": 1, "method": "fs.stat", "params": {"path": "\\ud800"}}', b"[1, 2]"):
            lane.sendall(len(body).to_bytes(4, "big") + body)
            assert read_frame(lane)["error"]["code"] == p.FRAME
        for frame in ({"method": "fs.stat", "params": {}}, {"id": 2, "method": "fs.stat", "params": [1]}):
            assert _ask(lane, frame)["error"]["code"] == p.BAD_REQUEST
        # Descriptors are refused on a lane (and closed), the lane goes on.
        r, w = os.pipe()
        body = encode_frame({"id": 3, "method": "fs.stat", "params": {"path": f"{ws}/ok.txt"}})
        lane.sendmsg([body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, r.to_bytes(4, "little"))])
        os.close(r)
        refused = read_frame(lane)
        assert refused["error"]["code"] == p.FRAME and "descriptors" in refused["error"]["message"]
        os.close(w)
        good = _ask(lane, {"id": 4, "method": "fs.stat", "params": {"path": f"{ws}/ok.txt"}})
        assert good["id"] == 4 and good["result"]["kind"] == "file"

        # An oversized length puts the stream out of step: answered, then that lane (only) is closed.
        lane.sendall((64 * 1024 * 1024).to_bytes(4, "big"))
        assert read_frame(lane)["error"]["code"] == p.FRAME
        with pytest.raises(EOFError):
            read_frame(lane)
        lane.close()
        assert (await client.call("ping", {}))[0] == {"pong": True}
        assert (await client.call_fast("fs.stat", {"path": f"{ws}/ok.txt"}))["kind"] == "file"
    finally:
        await client.close()


async def test_lane_open_wants_one_unix_stream_socket_and_a_bounded_number(runner_worker):
    client = await _client(runner_worker)
    r, w = os.pipe()
    datagram, datagram_peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    first, second = socket.socketpair()
    try:
        for fds, needs in [((), "exactly one"), ((first.fileno(), second.fileno()), "exactly one"),
                           ((r,), "socket"), ((datagram.fileno(),), "Unix stream socket")]:
            with pytest.raises(WorkerCallError) as caught:
                await client.call("lane.open", {}, list(fds))
            assert caught.value.code == p.BAD_PARAMS and caught.value.dispatched is False
            assert needs in caught.value.message
        lanes = [await _raw_lane(client) for _ in range(MAX_LANES)]
        with pytest.raises(WorkerCallError) as caught:
            await _raw_lane(client)
        assert caught.value.code == p.BAD_PARAMS and f"already has {MAX_LANES} lanes" in caught.value.message
        for lane in lanes:
            lane.close()
        assert (await client.call("ping", {}))[0] == {"pong": True}
    finally:
        for fd in (r, w):
            os.close(fd)
        for s in (datagram, datagram_peer, first, second):
            s.close()
        await client.close()


async def test_lanes_end_with_their_connection(runner_worker):
    ws = str(runner_worker.workspace)
    pid = runner_worker.proc.pid
    client = await _client(runner_worker)
    assert (await client.call_fast("fs.stat", {"path": f"{ws}/ok.txt"}))["kind"] == "file"
    await client.close()
    baseline = _threads(pid)
    for _ in range(10):
        client = await _client(runner_worker)
        assert (await client.call_fast("fs.read_file", {"path": f"{ws}/ok.txt"}))["content"] == "fine\n"
        await client.close()
    deadline = time.monotonic() + 10
    while _threads(pid) > baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert _threads(pid) <= baseline, "a lane's thread outlived its connection"


async def test_a_cancelled_lane_call_closes_the_lane_and_the_next_call_gets_a_new_one(monkeypatch):
    # The peer here is this test (a real socket pair): it never answers, so the call waits past
    # the lane's blocking wait and is then cancelled while awaited on the loop.
    ours, peer = socket.socketpair()
    lane = Lane(ours, frozenset({"fs.stat"}))
    monkeypatch.setattr(lane_client, "FAST_WAIT_S", 0.001)
    task = asyncio.create_task(lane.call("fs.stat", {"path": "/x"}))
    await asyncio.sleep(0.05)
    assert lane.busy and not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lane.closed and not lane.busy
    with pytest.raises(LaneLost):
        await lane.call("fs.stat", {"path": "/x"})
    peer.close()


async def test_an_answer_out_of_step_or_a_closed_peer_is_a_lost_lane():
    ours, peer = socket.socketpair()
    lane = Lane(ours, frozenset({"fs.stat"}))

    def answer_wrong_id() -> None:
        read_frame(peer)
        peer.sendall(encode_frame({"id": 999, "result": {}}))

    loop = asyncio.get_running_loop()
    served = loop.run_in_executor(None, answer_wrong_id)
    with pytest.raises(LaneLost, match="999"):
        await lane.call("fs.stat", {"path": "/x"})
    await served
    assert lane.closed
    ours, peer2 = socket.socketpair()
    lane = Lane(ours, frozenset({"fs.stat"}))
    peer2.close()
    with pytest.raises(LaneLost):
        await lane.call("fs.stat", {"path": "/x"})
    peer.close()


async def test_a_dead_worker_is_reported_by_the_connection_not_lost_on_the_lane(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        assert (await client.call_fast("fs.stat", {"path": f"{ws}/ok.txt"}))["kind"] == "file"
        os.kill(runner_worker.proc.pid, signal.SIGKILL)
        runner_worker.proc.wait(10)
        assert await client.call_fast("fs.read_file", {"path": f"{ws}/ok.txt"}) is None
        with pytest.raises(WorkerGone):
            await client.call("fs.read_file", {"path": f"{ws}/ok.txt"})
    finally:
        await client.close()


async def test_concurrent_reads_all_come_back_right(runner_worker):
    ws = str(runner_worker.workspace)
    for i in range(40):
        (runner_worker.workspace / f"f{i}.txt").write_text(f"file {i}\n")
    client = await _client(runner_worker)
    carried = {"lane": 0, "connection": 0}

    async def read(i: int) -> str:
        params = {"path": f"{ws}/f{i}.txt"}
        result = await client.call_fast("fs.read_file", params)
        if result is None:
            carried["connection"] += 1
            result = (await client.call("fs.read_file", params))[0]
        else:
            carried["lane"] += 1
        return result["content"]

    try:
        await client.call_fast("fs.stat", {"path": f"{ws}/ok.txt"})  # the lane is open before the burst
        for _ in range(3):
            got = await asyncio.gather(*(read(i) for i in range(40)))
            assert got == [f"file {i}\n" for i in range(40)]
        assert carried["lane"] >= 3 and sum(carried.values()) == 120, carried
    finally:
        await client.close()

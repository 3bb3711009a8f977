"""The service's answers, through a real worker process on a socket pair and the real client."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from codespace_runtime import protocol as p
from codespace_runtime.client import WorkerCallError, WorkerClient, WorkerGone
from codespace_runtime.service import MAX_IN_FLIGHT

from .conftest import make_token

HERE = Path(__file__).parent


@pytest.fixture
def pair(tmp_path: Path):
    token = make_token(tmp_path / "token")
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, str(HERE / "handlers_worker.py"), str(theirs.fileno()),
                             str(tmp_path / "token")], pass_fds=[theirs.fileno()], stderr=subprocess.PIPE)
    theirs.close()
    yield ours, token, proc
    ours.close()
    proc.kill()
    proc.wait()
    proc.stderr.close()


def run(pair, body):
    sock, token, proc = pair

    async def go():
        client = await WorkerClient.connect(sock, token, "test_service")
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(go())


def error_of(coro) -> WorkerCallError:
    async def go():
        with pytest.raises(WorkerCallError) as caught:
            await coro
        return caught.value
    return go()


def test_welcome_names_the_worker_process(pair):
    welcome = run(pair, lambda c: asyncio.sleep(0, c.welcome))
    assert (welcome.protocol, welcome.pid, welcome.uid, welcome.workspace) == (5, pair[2].pid, os.getuid(), "/test")
    assert welcome.policy_digest is None


def test_ping_and_status_after_hello(pair):
    async def body(c):
        return await c.call("ping", {}), await c.call("status", {})
    (pong, _), (status, _) = run(pair, body)
    assert pong == {"pong": True}
    assert status["alive"] is True and status["protocols"] == [5] and status["pid"] == pair[2].pid
    assert status["connection"]["client"] == "test_service" and "open_fds" in status


def test_concurrent_calls_are_answered_by_id_not_in_order(pair):
    async def body(c):
        slow = asyncio.create_task(c.call("sleep", {"seconds": 0.5}))
        fast = await asyncio.gather(*(c.call("echo", {"i": i}) for i in range(20)))
        assert not slow.done()  # twenty answers overtook the slow one on the same connection
        return fast, await slow
    fast, slow = run(pair, body)
    assert [r["params"]["i"] for r, _ in fast] == list(range(20))
    assert slow[0] == {"slept": 0.5}


def test_unknown_method_is_not_dispatched_and_lists_what_is_served(pair):
    error = run(pair, lambda c: error_of(c.call("fs.nothing", {})))
    assert (error.code, error.dispatched) == (p.UNKNOWN_METHOD, False)
    assert "'fs.nothing'" in error.message and "ping" in error.message and "echo" in error.message


def test_bad_params_are_not_dispatched(pair):
    error = run(pair, lambda c: error_of(c.call("strict", {})))
    assert (error.code, error.dispatched) == (p.BAD_PARAMS, False)
    assert "'path' is required" in error.message


def test_a_raising_handler_answers_dispatched_and_the_worker_goes_on(pair):
    async def body(c):
        error = await error_of(c.call("boom", {}))
        return error, await c.call("ping", {})
    error, pong = run(pair, body)
    assert (error.code, error.dispatched) == (p.FAILED, True)
    assert "ValueError" in error.message and "on purpose" in error.message
    assert pong[0] == {"pong": True}


def test_the_error_mapping_decides_code_dispatched_and_data(pair):
    error = run(pair, lambda c: error_of(c.call("mapped", {})))
    assert (error.code, error.dispatched, error.data) == ("mapped", False, {"key": "'mapped'"})


def test_results_that_are_not_objects_or_not_unicode_become_errors(pair):
    async def body(c):
        return await error_of(c.call("not.a.dict", {})), await error_of(c.call("unsendable", {}))
    wrong_type, unsendable = run(pair, body)
    assert wrong_type.code == p.FAILED and "not a dict" in wrong_type.message
    assert unsendable.code == p.FAILED and unsendable.dispatched and "not valid Unicode" in unsendable.message


def test_cancel_stops_a_running_request(pair):
    async def body(c):
        slow = asyncio.create_task(c.call("sleep", {"seconds": 30, "tag": 7}))
        await asyncio.sleep(0.2)
        request_id = max(c._pending)
        answer, _ = await c.call("cancel", {"id": request_id})
        error = await error_of(slow)
        status, _ = await c.call("status", {})
        missing, _ = await c.call("cancel", {"id": 99999})
        return answer, error, status, missing
    answer, error, status, missing = run(pair, body)
    assert answer == {"cancelled": True} and missing == {"cancelled": False}
    assert (error.code, error.dispatched) == (p.CANCELLED, True)
    assert status["cancelled"] == [7]


def test_cancelling_a_call_client_side_cancels_it_in_the_worker(pair):
    async def body(c):
        slow = asyncio.create_task(c.call("sleep", {"seconds": 30, "tag": 8}))
        await asyncio.sleep(0.2)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        for _ in range(50):
            status, _ = await c.call("status", {})
            if status["cancelled"]:
                return status
            await asyncio.sleep(0.02)
        return status
    assert run(pair, body)["cancelled"] == [8]


def test_descriptors_cross_both_ways(pair):
    async def body(c):
        r, w = os.pipe()
        os.write(w, b"through SCM_RIGHTS")
        os.close(w)
        sent, _ = await c.call("read.fd", {}, fds=[r])
        os.close(r)
        given, fds = await c.call("give.pipe", {"text": "back again"})
        data = os.read(fds[0], 100)
        os.close(fds[0])
        return sent, given, fds, data
    sent, given, fds, data = run(pair, body)
    assert sent == {"data": "through SCM_RIGHTS"} and given == {"given": 1}
    assert len(fds) == 1 and data == b"back again"


def test_refused_requests_close_the_descriptors_they_carried(pair):
    async def body(c):
        before, _ = await c.call("status", {})
        for _ in range(10):
            r, w = os.pipe()
            await error_of(c.call("fs.nothing", {}, fds=[r, w]))
            os.close(r)
            os.close(w)
        after, _ = await c.call("status", {})
        return before["open_fds"], after["open_fds"]
    before, after = run(pair, body)
    assert after == before


def test_notifications_reach_the_callback(pair):
    async def body(c):
        seen = []
        c.on_notification(lambda method, params, fds: seen.append((method, params)))
        await c.call("notify", {"n": 3})
        return seen
    assert run(pair, body) == [("test.event", {"n": 3})]


def test_more_requests_in_flight_than_allowed_are_refused_busy(pair):
    async def body(c):
        sleepers = [asyncio.create_task(c.call("sleep", {"seconds": 1})) for _ in range(MAX_IN_FLIGHT)]
        await asyncio.sleep(0.3)
        error = await error_of(c.call("echo", {}))
        await asyncio.gather(*sleepers)
        return error, await c.call("echo", {"after": True})
    error, after = run(pair, body)
    assert (error.code, error.dispatched) == (p.BUSY, False)
    assert after[0]["params"] == {"after": True}


def test_calls_in_flight_when_the_worker_dies_are_gone_and_dispatched(pair):
    sock, token, proc = pair

    async def body(c):
        slow = asyncio.create_task(c.call("sleep", {"seconds": 30}))
        await asyncio.sleep(0.2)
        proc.kill()
        with pytest.raises(WorkerGone) as in_flight:
            await slow
        with pytest.raises(WorkerGone) as after:
            await c.call("ping", {})
        return in_flight.value, after.value
    in_flight, after = run(pair, body)
    assert in_flight.dispatched is True and after.dispatched is False


def test_a_request_cancelled_before_it_started_is_still_answered(pair):
    """Found by testing: a cancel read in the same read as its request cancelled the request's
    task before its first step; nothing answered the request, and the client waited for it."""
    from codespace_runtime.framing import encode_frame

    async def body(c):
        loop = asyncio.get_running_loop()
        slow, cancel = loop.create_future(), loop.create_future()
        c._pending[900], c._pending[901] = slow, cancel
        both = (encode_frame({"id": 900, "method": "sleep", "params": {"seconds": 30, "tag": 10}}, 0)
                + encode_frame({"id": 901, "method": "cancel", "params": {"id": 900}}, 0))
        await loop.sock_sendall(c.sock, both)  # one write: the worker takes both from one read
        return await asyncio.wait_for(asyncio.gather(slow, cancel, return_exceptions=True), 5)
    slow, cancel = run(pair, body)
    assert cancel[0] == {"cancelled": True}, cancel
    assert isinstance(slow, WorkerCallError) and slow.code == p.CANCELLED and not slow.dispatched, slow

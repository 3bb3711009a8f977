"""Hostile frames against a real worker process: each gets a clear error or a closed connection,
and the worker keeps serving the next connection."""

from __future__ import annotations

import array
import json
import os
import socket
import struct
from collections import Counter

import pytest

from codespace_runtime import framing, protocol as p
from codespace_runtime.framing import MAX_FRAME, FrameError

from .conftest import Worker


def raw(worker: Worker) -> socket.socket:
    sock = worker.connect()
    sock.setblocking(True)
    sock.settimeout(10)
    return sock


def read_frame(sock: socket.socket) -> dict | None:
    header = sock.recv(4, socket.MSG_WAITALL)
    if not header:
        return None
    (length,) = struct.unpack(">I", header)
    return json.loads(sock.recv(length, socket.MSG_WAITALL))


def send_raw(sock: socket.socket, body: bytes, fds: list[int] = ()) -> None:
    data = struct.pack(">I", len(body)) + body
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def closed(sock: socket.socket) -> bool:
    """The worker closed its end (a reset counts: it closed with our unread bytes in its buffer)."""
    try:
        return read_frame(sock) is None
    except ConnectionResetError:
        return True


def hello(worker: Worker, sock: socket.socket) -> None:
    greeting = read_frame(sock)
    request = {"id": 0, "method": "hello",
               "params": {"protocol": 5, "proof": p.proof(worker.token, greeting["nonce"]), "client": "t"}}
    send_raw(sock, json.dumps(request).encode())
    assert "result" in read_frame(sock)


def still_serving(worker: Worker) -> None:
    sock = raw(worker)
    hello(worker, sock)
    send_raw(sock, b'{"id": 1, "method": "ping", "params": {}}')
    assert read_frame(sock) == {"id": 1, "result": {"pong": True}}
    sock.close()
    assert worker.proc.poll() is None


def open_fds(pid: int) -> Counter:
    if os.geteuid() != 0:
        pytest.skip("counts a hardened (non-dumpable) worker's descriptors, which only root may read")
    return Counter(os.readlink(f"/proc/{pid}/fd/{name}") for name in os.listdir(f"/proc/{pid}/fd"))


def test_an_oversized_length_is_refused_before_the_body_is_read(worker):
    sock = raw(worker)
    hello(worker, sock)
    sock.sendall(struct.pack(">I", MAX_FRAME + 1))  # and no body at all: the answer must not wait for it
    answer = read_frame(sock)
    assert answer["id"] is None and answer["error"]["code"] == p.FRAME
    assert str(MAX_FRAME) in answer["error"]["message"] and str(MAX_FRAME + 1) in answer["error"]["message"]
    assert closed(sock)  # out of step: closed
    still_serving(worker)


def test_a_frame_of_exactly_the_limit_is_read(worker):
    sock = raw(worker)
    hello(worker, sock)
    prefix = b'{"id": 1, "method": "ping", "params": {"pad": "'
    suffix = b'"}}'
    send_raw(sock, prefix + b"x" * (MAX_FRAME - len(prefix) - len(suffix)) + suffix)
    assert read_frame(sock) == {"id": 1, "result": {"pong": True}}


@pytest.mark.parametrize("sent", [b"\x00\x00", b"\x00\x00\x00\x10{\"id\": 1"], ids=["header", "body"])
def test_a_truncated_frame_closes_that_connection_only(worker, sent):
    sock = raw(worker)
    hello(worker, sock)
    sock.sendall(sent)
    sock.shutdown(socket.SHUT_WR)
    answer = read_frame(sock)
    assert answer is not None and "truncated frame" in answer["error"]["message"]
    assert closed(sock)
    still_serving(worker)


@pytest.mark.parametrize(("body", "words"), [
    (b"{not json", "not JSON"),
    (b"[1, 2, 3]", "not list"),
    (b'"a string"', "not str"),
    (b'{"id": 1, "method": "ping", "params": {"p": "\xff\xfe"}}', "not UTF-8"),
    (b'{"id": 1, "method": "ping", "params": {"p": "\\ud800"}}', "lone UTF-16 surrogate"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b'{"id": 1, "method": "ping", "params": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001, "nested too deeply"),
], ids=["garbage", "array", "string", "invalid-utf8", "lone-surrogate", "deep-array", "deep-params"])
def test_an_unreadable_frame_gets_an_error_and_the_connection_goes_on(worker, body, words):
    sock = raw(worker)
    hello(worker, sock)
    send_raw(sock, body)
    answer = read_frame(sock)
    assert answer["error"]["code"] == p.FRAME and words in answer["error"]["message"]
    assert answer["error"]["dispatched"] is False
    send_raw(sock, b'{"id": 2, "method": "ping", "params": {}}')
    assert read_frame(sock) == {"id": 2, "result": {"pong": True}}
    still_serving(worker)


@pytest.mark.parametrize(("declared", "attached"), [(2, 1), (0, 2), (1, 0), (-1, 0), ("1", 1)])
def test_a_descriptor_count_that_does_not_match_is_refused_and_nothing_leaks(worker, declared, attached):
    sock = raw(worker)
    hello(worker, sock)
    before = open_fds(worker.proc.pid)
    for request_id in range(5):
        pipes = [os.pipe() for _ in range(attached)]
        body = json.dumps({"id": request_id, "method": "ping", "params": {}, "fds": declared}).encode()
        send_raw(sock, body, [r for r, _ in pipes])
        answer = read_frame(sock)
        assert answer["error"]["code"] == p.FRAME and "descriptor" in answer["error"]["message"]
        for r, w in pipes:
            os.close(r)
            os.close(w)
    assert open_fds(worker.proc.pid) == before
    still_serving(worker)


def test_too_many_descriptors_close_the_connection_and_leak_nothing(worker):
    sock = raw(worker)
    hello(worker, sock)
    before = open_fds(worker.proc.pid)
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(framing.MAX_FDS + 8)]
    body = json.dumps({"id": 1, "method": "ping", "params": {}, "fds": len(fds)}).encode()
    send_raw(sock, body, fds)
    answer = read_frame(sock)
    assert answer["error"]["code"] == p.FRAME and "more than" in answer["error"]["message"]
    assert closed(sock)
    for fd in fds:
        os.close(fd)
    after = open_fds(worker.proc.pid)
    assert after["/dev/null"] == before["/dev/null"]  # none of the 40 stayed open
    assert sum(after.values()) == sum(before.values()) - 1  # and the connection itself is gone
    still_serving(worker)


def test_a_frame_that_is_not_a_request_names_what_a_request_is(worker):
    sock = raw(worker)
    hello(worker, sock)
    send_raw(sock, b'{"id": "seven", "method": 3}')
    answer = read_frame(sock)
    assert answer["id"] is None and answer["error"]["code"] == p.BAD_REQUEST
    assert "'id'" in answer["error"]["message"] and "'method'" in answer["error"]["message"]
    send_raw(sock, b'{"id": 4, "method": "ping", "params": []}')
    answer = read_frame(sock)
    assert answer["id"] == 4 and "params" in answer["error"]["message"]


def test_many_hostile_connections_at_once_do_not_stop_the_worker(worker):
    socks = [raw(worker) for _ in range(30)]
    for i, sock in enumerate(socks):
        read_frame(sock)
        sock.sendall([b"\xff\xff\xff\xff", b"\x00\x00\x00\x05{{{{{", b"\x00\x00"][i % 3])
        if i % 3 == 2:
            sock.close()
    still_serving(worker)


def test_encode_refuses_what_cannot_be_a_frame():
    with pytest.raises(FrameError, match="not valid Unicode"):
        framing.encode_frame({"s": "\udc80"})
    with pytest.raises(FrameError, match="over the limit"):
        framing.encode_frame({"s": "x" * MAX_FRAME})
    with pytest.raises(FrameError, match="not JSON-serialisable"):
        framing.encode_frame({"f": float("nan")})
    assert framing.encode_frame({"a": 1}, 2)[4:] == b'{"a":1,"fds":2}'


def test_descriptors_sent_between_other_frames_belong_to_their_own_frame(worker):
    sock = raw(worker)
    hello(worker, sock)
    before = open_fds(worker.proc.pid)
    for round_ in range(20):
        r, w = os.pipe()
        send_raw(sock, json.dumps({"id": 3 * round_, "method": "ping", "params": {}}).encode())
        send_raw(sock, json.dumps({"id": 3 * round_ + 1, "method": "ping", "params": {}, "fds": 1}).encode(), [r])
        send_raw(sock, json.dumps({"id": 3 * round_ + 2, "method": "ping", "params": {}}).encode())
        answers = [read_frame(sock) for _ in range(3)]
        assert answers == [{"id": 3 * round_ + i, "result": {"pong": True}} for i in range(3)]
        os.close(r)
        os.close(w)
    assert open_fds(worker.proc.pid) == before  # ping closed the descriptor it was handed

"""The read-ahead reader on a real socket pair: frames written before it reads (so that one read
holds several) come out whole, in order, with each frame's own descriptors."""

from __future__ import annotations

import array
import asyncio
import json
import os
import socket
import struct

import pytest

from codespace_runtime.framing import MAX_FRAME, FrameError
from codespace_runtime.reader import MAX_AHEAD, FrameReader


def frame(obj: dict) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def send(sock: socket.socket, obj: dict, fds: list[int] = ()) -> None:
    data = frame({**obj, "fds": len(fds)} if fds else obj)
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def read_all(ours: socket.socket, count: int) -> list:
    async def go():
        ours.setblocking(False)
        reader = FrameReader(ours)
        got = []
        for _ in range(count):
            try:
                got.append(await asyncio.wait_for(reader.next(), 5))
            except (FrameError, EOFError) as exc:
                got.append(exc)
        reader.close()
        return got
    return asyncio.run(go())


def pipe_with(text: bytes) -> int:
    r, w = os.pipe()
    os.write(w, text)
    os.close(w)
    return r


@pytest.mark.parametrize("carrier", [0, 1, 2, 3])
def test_descriptors_go_to_the_frame_they_were_sent_with(carrier):
    ours, theirs = socket.socketpair()
    sent = []
    for i in range(4):
        fds = [pipe_with(f"frame {i}".encode())] if i == carrier else []
        send(theirs, {"n": i}, fds)
        sent += fds
    for fd in sent:
        os.close(fd)
    got = read_all(ours, 4)
    assert [obj["n"] for obj, _ in got] == [0, 1, 2, 3]
    for i, (obj, fds) in enumerate(got):
        assert len(fds) == (1 if i == carrier else 0)
        for fd in fds:
            assert os.read(fd, 100) == f"frame {i}".encode()
            os.close(fd)


def test_two_frames_with_descriptors_in_a_row():
    ours, theirs = socket.socketpair()
    a, b = pipe_with(b"a"), pipe_with(b"b")
    send(theirs, {"n": 0}, [a])
    send(theirs, {"n": 1}, [b])
    os.close(a)
    os.close(b)
    got = read_all(ours, 2)
    assert [os.read(fds[0], 1) for _, fds in got] == [b"a", b"b"]


def test_a_declared_count_without_descriptors_is_refused_and_the_next_frame_read():
    ours, theirs = socket.socketpair()
    theirs.sendall(frame({"n": 0, "fds": 1}) + frame({"n": 1}))
    first, second = read_all(ours, 2)
    assert isinstance(first, FrameError) and not first.fatal
    assert second == ({"n": 1}, [])


def test_large_frames_split_over_many_reads():
    ours, theirs = socket.socketpair()
    big = {"pad": "y" * (3 * 1024 * 1024)}

    async def go():
        ours.setblocking(False)
        theirs.setblocking(False)
        reader = FrameReader(ours)
        loop = asyncio.get_running_loop()
        writing = loop.create_task(loop.sock_sendall(theirs, frame(big) + frame({"after": True})))
        got = [await reader.next(), await reader.next()]
        await writing
        reader.close()
        return got
    (first, _), (second, _) = asyncio.run(go())
    assert first == big and second == {"after": True}


def test_an_oversized_length_ends_the_stream_and_stays_ended():
    ours, theirs = socket.socketpair()
    theirs.sendall(frame({"n": 0}) + struct.pack(">I", MAX_FRAME + 1))
    got = read_all(ours, 3)
    assert got[0] == ({"n": 0}, [])
    assert isinstance(got[1], FrameError) and got[1].fatal and isinstance(got[2], FrameError)


def test_eof_inside_a_frame_is_truncation_and_between_frames_is_eof():
    ours, theirs = socket.socketpair()
    theirs.sendall(frame({"n": 0}) + frame({"n": 1})[:7])
    theirs.close()
    got = read_all(ours, 3)
    assert got[0] == ({"n": 0}, []) and "truncated" in str(got[1])
    ours, theirs = socket.socketpair()
    theirs.sendall(frame({"n": 0}))
    theirs.close()
    assert isinstance(read_all(ours, 2)[1], EOFError)


def test_reading_pauses_when_the_owner_falls_behind_and_closing_releases_descriptors():
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    r = pipe_with(b"x")
    count = 0
    while True:  # fill the socket: the reader must not take it all into memory
        try:
            send(theirs, {"n": count}, [r] if count % 10 == 0 else [])
        except BlockingIOError:
            break
        count += 1
    os.close(r)

    async def go():
        ours.setblocking(False)
        reader = FrameReader(ours)
        await asyncio.sleep(0.2)
        held = len(reader._ready)
        first = await reader.next()
        reader.close()
        return held, first
    before = len(os.listdir("/proc/self/fd"))
    held, (obj, fds) = asyncio.run(go())
    # It stops once MAX_AHEAD frames wait (the read that crossed the line may hold a few more).
    assert count > 2 * MAX_AHEAD and MAX_AHEAD <= held < 2 * MAX_AHEAD and obj["n"] == 0 and len(fds) == 1
    os.close(fds[0])
    assert len(os.listdir("/proc/self/fd")) <= before  # the frames read ahead gave their descriptors back

"""The handshake against a real worker: greeting first, hello with protocol 5 and the token's
proof, nothing but ``status`` before it; and a worker that will not start on a bad token file."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess

import pytest

from codespace_runtime import protocol as p
from codespace_runtime.client import WorkerCallError, WorkerClient, WorkerError, fetch_status
from codespace_runtime.framing import send_frame

from .conftest import UNPRIVILEGED_UID, make_token, start_worker, stop_worker, worker_argv
from .test_framing import closed, raw, read_frame, send_raw


def hello_frame(protocol: object, proof: str, request_id: int = 0) -> bytes:
    return json.dumps({"id": request_id, "method": "hello",
                       "params": {"protocol": protocol, "proof": proof, "client": "test"}}).encode()


def test_the_worker_greets_first_with_its_protocols_and_a_fresh_nonce(worker):
    first, second = raw(worker), raw(worker)
    one, two = read_frame(first), read_frame(second)
    assert one["protocols"] == [5] and one["worker"] == p.WORKER_VERSION
    assert len(one["nonce"]) == 64 and int(one["nonce"], 16) >= 0
    assert one["nonce"] != two["nonce"]


@pytest.mark.parametrize("theirs", [4, 6, 0])
def test_another_protocol_is_refused_naming_both_versions(worker, theirs):
    sock = raw(worker)
    greeting = read_frame(sock)
    send_raw(sock, hello_frame(theirs, p.proof(worker.token, greeting["nonce"])))
    error = read_frame(sock)["error"]
    assert error["code"] == p.PROTOCOL_MISMATCH and error["dispatched"] is False
    assert "protocol 5" in error["message"] and f"protocol {theirs}" in error["message"]
    assert closed(sock)


def test_a_protocol_that_is_not_a_number_is_refused(worker):
    sock = raw(worker)
    read_frame(sock)
    send_raw(sock, hello_frame("5", "00"))
    error = read_frame(sock)["error"]
    assert error["code"] == p.BAD_PARAMS and "protocol" in error["message"]


@pytest.mark.parametrize("proof", ["", "00" * 32, "not hex at all", "é" * 40, "proof-of-another-nonce"])
def test_a_wrong_proof_is_refused_and_the_connection_closed(worker, proof):
    sock = raw(worker)
    read_frame(sock)
    if proof == "proof-of-another-nonce":
        proof = p.proof(worker.token, "ab" * 32)
    send_raw(sock, hello_frame(5, proof))
    error = read_frame(sock)["error"]
    assert error["code"] == p.BAD_PROOF and "token" in error["message"]
    assert closed(sock)


def test_a_proof_with_another_token_is_refused(worker):
    async def go():
        sock = worker.connect()
        with pytest.raises(WorkerCallError) as caught:
            await WorkerClient.connect(sock, b"another-token-of-32-characters!!", "test")
        sock.close()
        return caught.value
    assert asyncio.run(go()).code == p.BAD_PROOF


@pytest.mark.parametrize("method", ["ping", "shutdown", "cancel", "fs.read_file"])
def test_requests_before_hello_are_refused(worker, method):
    sock = raw(worker)
    read_frame(sock)
    send_raw(sock, json.dumps({"id": 3, "method": method, "params": {}}).encode())
    answer = read_frame(sock)
    assert answer["id"] == 3 and answer["error"]["code"] == p.NOT_AUTHENTICATED
    assert "hello" in answer["error"]["message"] and answer["error"]["dispatched"] is False
    assert worker.proc.poll() is None  # shutdown before hello did not stop it


def test_before_hello_a_frame_is_small_and_the_connection_holds_little(worker):
    """Found by testing: before hello the worker read ahead up to a full frame (16 MiB) and 64
    frames for any connection that never proved its token."""
    import resource

    sock = raw(worker)
    read_frame(sock)
    big = json.dumps({"id": 1, "method": "status", "params": {"pad": "x" * (1 << 20)}}).encode()
    header_only = len(big).to_bytes(4, "big")
    sock.sendall(header_only)
    error = read_frame(sock)["error"]
    assert error["code"] == p.FRAME and "over the limit of 65536" in error["message"], error
    assert closed(sock)
    # Many small frames that are never read: the worker stops reading instead of queueing them.
    rss_before = int(open(f"/proc/{worker.proc.pid}/statm").read().split()[1])
    flooders = []
    for _ in range(8):
        flooder = raw(worker)
        read_frame(flooder)
        flooder.setblocking(False)
        frame = json.dumps({"id": 1, "method": "status", "params": {"pad": "y" * 60000}}).encode()
        sent = 0
        try:
            while sent < 16 << 20:
                sent += flooder.send(len(frame).to_bytes(4, "big") + frame)
        except BlockingIOError:
            pass
        flooders.append(flooder)
        assert sent < 4 << 20, f"the worker took {sent} bytes from a connection that never said hello"
    grown = (int(open(f"/proc/{worker.proc.pid}/statm").read().split()[1]) - rss_before) * resource.getpagesize()
    assert grown < 16 << 20, f"the worker grew by {grown} bytes for 8 connections that never said hello"
    for flooder in flooders:
        flooder.close()
    assert worker.proc.poll() is None


def test_status_before_hello_says_versions_and_liveness_only(worker):
    sock = worker.connect()
    status = asyncio.run(fetch_status(sock))
    assert status == {"protocols": [5], "worker": p.WORKER_VERSION, "alive": True, "greeting_protocols": [5]}


def test_a_good_hello_is_welcomed_with_the_worker_identity(worker):
    async def go():
        client = await WorkerClient.connect(worker.connect(), worker.token, "test")
        pong = await client.call("ping", {})
        await client.close()
        return client.welcome, pong
    welcome, pong = asyncio.run(go())
    assert (welcome.protocol, welcome.pid, welcome.uid) == (5, worker.proc.pid, os.getuid())
    assert welcome.workspace == str(worker.workspace.resolve()) and pong == ({"pong": True}, [])


def test_a_second_hello_is_refused(worker):
    async def go():
        client = await WorkerClient.connect(worker.connect(), worker.token, "test")
        with pytest.raises(WorkerCallError) as caught:
            await client.call("hello", {"protocol": 5, "proof": "", "client": "again"})
        await client.close()
        return caught.value
    assert "already said hello" in asyncio.run(go()).message


def test_a_silent_connection_is_closed_after_the_hello_timeout(tmp_path, monkeypatch):
    # The timeout is the service's; the test runs it in process over a real socket pair.
    from codespace_runtime import service

    monkeypatch.setattr(service, "HELLO_TIMEOUT", 0.3)

    async def go():
        ours, theirs = socket.socketpair()
        serving = asyncio.create_task(service.serve_connection(theirs, b"t" * 32, {}, dict))
        await asyncio.wait_for(serving, 5)
        ours.setblocking(True)
        ours.recv(1 << 16)  # the greeting
        return ours.recv(1)
    assert asyncio.run(go()) == b""


def test_the_client_refuses_a_worker_offering_another_protocol():
    async def go():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        await send_frame(theirs, {"protocols": [4], "nonce": "ab" * 32, "worker": "0.0.1"})
        with pytest.raises(WorkerError) as caught:
            await WorkerClient.connect(ours, b"t" * 32, "test")
        return str(caught.value)
    message = asyncio.run(go())
    assert "protocol 5" in message and "offers 4" in message


def test_proofs_are_compared_in_constant_time():
    assert "compare_digest" in p.proof_matches.__code__.co_names
    nonce = "cd" * 32
    assert p.proof_matches(b"k" * 32, nonce, p.proof(b"k" * 32, nonce))
    assert not p.proof_matches(b"k" * 32, nonce, p.proof(b"j" * 32, nonce))


def _start_fails(tmp_path, token_file) -> str:
    (tmp_path / "ws").mkdir(exist_ok=True)
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700, exist_ok=True)
    done = subprocess.run(worker_argv("serve", "--workspace", str(tmp_path / "ws"), "--socket",
                                      str(directory / "worker.sock"), "--token-file", str(token_file), "--no-runner"),
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 2, done.stderr
    assert not (directory / "worker.sock").exists()
    return done.stderr


def test_a_token_file_others_may_read_stops_the_start(tmp_path):
    make_token(tmp_path / "token")
    os.chmod(tmp_path / "token", 0o640)
    message = _start_fails(tmp_path, tmp_path / "token")
    assert "mode is 0640" in message and "chmod 600" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the token file to another uid needs root")
def test_a_token_file_of_another_uid_stops_the_start(tmp_path):
    make_token(tmp_path / "token")
    os.chown(tmp_path / "token", UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    message = _start_fails(tmp_path, tmp_path / "token")
    assert f"belongs to uid {UNPRIVILEGED_UID}" in message


@pytest.mark.parametrize("kind", ["link", "missing", "short", "directory"])
def test_other_bad_token_files_stop_the_start(tmp_path, kind):
    target = tmp_path / "token"
    if kind == "link":
        make_token(tmp_path / "real")
        target.symlink_to(tmp_path / "real")
    elif kind == "short":
        target.write_bytes(b"abc\n")
        target.chmod(0o600)
    elif kind == "directory":
        target.mkdir(mode=0o700)
    message = _start_fails(tmp_path, target)
    assert str(target) in message


def test_after_refusals_a_good_client_is_still_served(tmp_path):
    running = start_worker(tmp_path)
    try:
        for _ in range(5):
            sock = raw(running)
            read_frame(sock)
            send_raw(sock, hello_frame(5, "00"))
            sock.close()
        test_a_good_hello_is_welcomed_with_the_worker_identity(running)
    finally:
        stop_worker(running)

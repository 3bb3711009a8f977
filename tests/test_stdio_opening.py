"""The opening of a stdio connection, served before the event loop (transports/stdio_opening.py):
what a client does between spawning the server and its first tool call, written the ways real
clients and pipes write it. Real server subprocesses over real pipes; the byte-for-byte
comparison with the SDK's answers is tests/test_stdio_front.py's (its sessions open here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from codespace.plugins import ENV_ALLOW

from .conftest import codespace_cmd, subprocess_env
from .test_stdio_front import INIT, INITIALIZED

LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
TALLY = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "o"}}}


def _no_transport_traceback(stderr: str) -> None:
    # (the example plugin's service fails on purpose and logs its own traceback)
    assert "transports" not in "".join(line for line in stderr.splitlines() if line.lstrip().startswith("File ")), \
        stderr


def _line(message: dict) -> bytes:
    return json.dumps(message).encode() + b"\n"


class Server:
    def __init__(self, tmp_path: Path, *, cache: str = "1", state_home: Path | None = None) -> None:
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        env = subprocess_env(**{ENV_ALLOW: "example", "CODESPACE_LISTING_CACHE": cache,
                                "XDG_STATE_HOME": str(state_home or tmp_path / "xdg")})
        self.proc = subprocess.Popen([*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir",
                                      str(tmp_path / "state")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read().decode()[-3000:] if self.proc.stderr else "no answer"
        return json.loads(line)

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        return code, self.proc.stderr.read().decode() if self.proc.stderr else ""


@pytest.mark.parametrize("cache", ["0", "1"], ids=["built", "kept"])
def test_messages_cut_anywhere_are_answered_in_order(tmp_path, cache):
    """Every byte written on its own (a client's writes and a pipe's reads need not meet at
    line ends), a blank line and a ping among them."""
    if cache == "1":
        warm = Server(tmp_path, cache="1")
        warm.send(_line(INIT) + _line(INITIALIZED) + _line(LIST))
        assert warm.answer()["id"] == 1 and warm.answer()["id"] == 2
        assert warm.close()[0] == 0
    server = Server(tmp_path, cache=cache)
    wire = _line(INIT) + b"\n" + _line(INITIALIZED) + _line({"jsonrpc": "2.0", "id": "p", "method": "ping"}) \
        + _line(LIST) + _line(TALLY)
    for index in range(len(wire)):
        server.send(wire[index:index + 1])
    answers = [server.answer() for _ in range(4)]
    assert [a["id"] for a in answers] == [1, "p", 2, 3]
    assert answers[1]["result"] == {}
    assert "tally" in [t["name"] for t in answers[2]["result"]["tools"]]
    assert answers[3]["result"]["isError"] is False, answers[3]
    code, stderr = server.close()
    assert code == 0, stderr
    _no_transport_traceback(stderr)


def test_a_client_that_waits_after_initialize_is_served_once_the_tools_are_loaded(tmp_path):
    """No tools/list: the opening ends when the tools are loaded, and the call made long after
    is served by the connection, with the handshake the opening answered."""
    server = Server(tmp_path, cache="0")
    server.send(_line(INIT) + _line(INITIALIZED))
    assert server.answer()["result"]["protocolVersion"] == INIT["params"]["protocolVersion"]
    time.sleep(3)
    server.send(_line(TALLY))
    answer = server.answer()
    assert answer["id"] == 3 and answer["result"]["isError"] is False, answer
    assert server.close()[0] == 0


def test_a_first_message_the_opening_does_not_serve_goes_to_the_connection(tmp_path):
    server = Server(tmp_path)
    server.send(b"{not json\n" + _line(INIT) + _line({"jsonrpc": "2.0", "id": 7, "method": "resources/list"})
                + _line(INITIALIZED) + _line(LIST))
    first = server.answer()
    assert first["id"] is None and first["error"]["code"] == -32700
    answers = {a["id"]: a for a in (server.answer() for _ in range(3))}
    assert answers[1]["result"]["serverInfo"]["name"] == "codespace"
    assert "error" in answers[7] or "resources" in answers[7]["result"], answers[7]
    assert answers[2]["result"]["tools"]
    assert server.close()[0] == 0


def test_end_of_input_during_the_opening(tmp_path):
    """A client that sends initialize and leaves: its answer is written, the server exits 0."""
    server = Server(tmp_path, cache="0")
    server.send(_line(INIT))
    code, stderr = server.close()
    assert code == 0, stderr
    assert server.proc.stdout is not None
    assert json.loads(server.proc.stdout.read().splitlines()[0])["id"] == 1


def test_a_client_gone_before_its_answers_does_not_leave_a_traceback(tmp_path):
    server = Server(tmp_path, cache="0")
    assert server.proc.stdout is not None
    server.proc.stdout.close()  # the reader is gone: writing the answers fails
    server.send(_line(INIT) + _line(INITIALIZED) + _line(LIST))
    code, stderr = server.close()
    assert code == 0, stderr
    _no_transport_traceback(stderr)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_opening_stops_the_server_at_once(tmp_path, signum):
    server = Server(tmp_path, cache="0")
    server.send(_line(INIT))
    assert server.answer()["id"] == 1
    started = time.monotonic()
    os.kill(server.proc.pid, signum)
    code = server.proc.wait(timeout=10)
    assert time.monotonic() - started < 1.0
    assert code in (128 + signum, -signum)
    assert server.proc.stderr is not None
    _no_transport_traceback(server.proc.stderr.read().decode())


def test_a_bad_initialize_is_told_what_in_its_params_is_wrong(tmp_path):
    """Found by testing from outside (over HTTP, then checked here): an initialize without
    capabilities was told the connection was not initialized and to send initialize."""
    server = Server(tmp_path)
    server.send(_line({**INIT, "params": {"protocolVersion": "2025-06-18"}}) + _line({**INIT, "id": 2}))
    answers = {a["id"]: a for a in (server.answer() for _ in range(2))}
    bad, good = answers[1], answers[2]
    assert bad["error"]["code"] == -32602 and "params.capabilities" in bad["error"]["data"], bad
    assert "not initialized" not in bad["error"]["data"], bad
    assert good["result"]["serverInfo"]["name"] == "codespace"
    assert server.close()[0] == 0

"""The stdio reader's line splitting (codespace.transports.stdio_fds.Lines): lines across any
chunking, the last line at end of input, and a line past the cap dropped as it arrives."""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest
from codespace.plugins import ENV_ALLOW
from codespace.transports import stdio_fds
from codespace.transports.stdio_fds import Lines
from codespace.transports.wire import TOO_LONG

from .conftest import codespace_cmd, subprocess_env
from .test_stdio_front import INIT, INITIALIZED, replies, serve_lines


def _feed_all(data: bytes, sizes: list[int]) -> list[bytes]:
    reader, out, at = Lines(), [], 0
    for size in sizes:
        if data[at:at + size]:  # an empty chunk is the end of input
            out += reader.feed(data[at:at + size])
        at += size
    if data[at:]:
        out += reader.feed(data[at:])
    return out + reader.feed(b"")


def test_any_chunking_gives_the_same_lines():
    data = b"\n".join(b"x" * n for n in (0, 1, 5, 200, 3, 0, 0, 70)) + b"\nlast"
    want = data.split(b"\n")
    rng = random.Random(7)
    for _ in range(300):
        sizes = [rng.randint(1, 40) for _ in range(rng.randint(0, 30))]
        assert _feed_all(data, sizes) == want, sizes
    assert _feed_all(data, [len(data)]) == want


def test_a_line_past_the_cap_is_dropped_as_it_arrives(monkeypatch):
    monkeypatch.setattr(stdio_fds, "MAX_LINE_BYTES", 100)
    reader = Lines()
    assert reader.feed(b"a" * 60) == [] and reader.feed(b"b" * 60) == []
    assert len(reader.pending) == 0  # nothing of it is held
    assert reader.feed(b"c" * 500) == []
    assert reader.feed(b"tail\n" + b"y" * 100 + b"\nz") == [TOO_LONG, b"y" * 100]  # exactly the cap: kept
    assert reader.feed(b"z" * 200) == []
    assert reader.feed(b"") == [TOO_LONG]  # too long at end of input too
    assert reader.feed(b"ok\n") == [b"ok"]  # and the reader goes on


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_line_over_64_mib_gets_an_error_and_the_next_is_served(tmp_path, direct):
    """It used to be held whole (and taken in time growing with its square: 446 s for 300 MB).
    Its answer carries the request's id where the line's first or last bytes show it: found by
    testing from outside, an answer with id null never reached the TypeScript SDK's caller, which
    timed out after 60 s (that SDK writes the id last)."""
    content = b'"content":"' + b"x" * (65 << 20) + b'"'
    python_order = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"write_file","arguments":' \
                   b'{"path":"a",' + content + b'}}}'
    typescript_order = b'{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"a",' + content + \
                       b'}},"jsonrpc":"2.0","id":10}'
    nested_only = b'{"method":"tools/call","params":{"arguments":{' + content + b',"id":11}}}'  # no top-level id
    got = replies(serve_lines(tmp_path, f"long-{direct}", [INIT, INITIALIZED, python_order, typescript_order,
                                                            nested_only, {"jsonrpc": "2.0", "id": 2, "method": "ping"}],
                              direct=direct))
    errors = {key: json.loads(raw[0] if key is None else raw)["error"] for key, raw in got.items() if key != 2 and
              key != 1}
    assert set(errors) == {9, 10, None}, errors
    for error in errors.values():
        assert error["code"] == -32600 and "longer than 64 MiB" in error["message"], error
        assert "max_argument_bytes" in error["message"]
    assert len(got[None]) == 1 and 11 not in got  # the nested id is not taken for the request's
    assert json.loads(got[2])["result"] == {}


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_request_reusing_the_id_of_one_still_running_is_refused_and_not_run(tmp_path, direct):
    """Found by testing from outside: both ran, and both answers carried the one id (a client
    retrying a call that has not answered yet would run its side effect twice). The second is
    refused with the id named, nothing of it runs, and the id is free again once answered."""
    def call(request_id: int, name: str, arguments: dict) -> dict:
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}

    slow = call(5, "exec", {"command": "sleep 1; echo first > first.txt", "timeout_ms": 30000})
    again = call(5, "write_file", {"path": "second.txt", "content": "second"})
    listing = {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}  # answered by the SDK on direct=0
    listing_again = {"jsonrpc": "2.0", "id": 6, "method": "resources/list"}
    done = serve_lines(tmp_path, f"dup-{direct}", [INIT, INITIALIZED, slow, again, listing, listing_again],
                       extra_env={ENV_ALLOW: "example,fs"})
    answers = [json.loads(raw) for raw in done.stdout.splitlines() if b'"id"' in raw]
    fives = [a for a in answers if a.get("id") == 5]
    assert len(fives) == 2, answers
    refused = [a for a in fives if "error" in a]
    assert len(refused) == 1 and refused[0]["error"]["code"] == -32600, fives
    assert "id 5 belongs to a request that has not been answered" in refused[0]["error"]["message"]
    assert not (tmp_path / f"ws-dup-{direct}" / "second.txt").exists()
    assert (tmp_path / f"ws-dup-{direct}" / "first.txt").read_text() == "first\n"
    # The one in flight answered normally; so did the listing (its twin was refused, or answered after it).
    assert not any(a.get("result", {}).get("isError") for a in fives if "result" in a), fives
    assert any("result" in a and "tools" in a["result"] for a in answers if a.get("id") == 6), answers
    # Once answered, the id may be used again in the same session.
    ws = tmp_path / f"ws-dup-{direct}"
    env = subprocess_env(**{ENV_ALLOW: "example,fs", "CODESPACE_DIRECT_CALLS": direct,
                            "XDG_STATE_HOME": str(tmp_path / "xdg-again")})
    with subprocess.Popen([*codespace_cmd(), "serve", "--workspace", str(ws), "--state-dir", str(tmp_path / "again")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) as server:
        def ask(message: dict) -> dict:
            server.stdin.write(json.dumps(message).encode() + b"\n")
            server.stdin.flush()
            while True:
                answer = json.loads(server.stdout.readline())
                if answer.get("id") == message.get("id"):
                    return answer

        ask(INIT)
        server.stdin.write(json.dumps(INITIALIZED).encode() + b"\n")
        for n in range(2):
            answer = ask(call(8, "write_file", {"path": f"again{n}.txt", "content": "x"}))
            assert "result" in answer and not answer["result"].get("isError"), answer
        server.stdin.close()
        assert server.wait(timeout=30) == 0


def test_a_cancelled_request_frees_its_id_and_the_reserved_id_is_refused(tmp_path):
    """Found by testing from outside: on the SDK's road a cancelled request is never answered, so its
    id stayed taken and the server waited for it at end of input; a client using the id of the
    initialize the front replays to the SDK got no answer, and the same wait."""
    slow = {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {  # inputResponses: the SDK's road
        "name": "exec", "arguments": {"command": "sleep 5; echo late > late.txt", "timeout_ms": 30000},
        "inputResponses": {}}}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 21}}
    again = {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
        "name": "write_file", "arguments": {"path": "again.txt", "content": "x"}}}
    reserved = {"jsonrpc": "2.0", "id": "codespace-front:initialize-replay", "method": "tools/list"}
    started = time.monotonic()
    done = serve_lines(tmp_path, "cancel", [INIT, INITIALIZED, slow, cancel, again, reserved],
                       extra_env={ENV_ALLOW: "example,fs"})
    assert time.monotonic() - started < 20  # no wait for an answer that will not come
    answers = [json.loads(raw) for raw in done.stdout.splitlines()]
    ran = [a for a in answers if a.get("id") == 21]
    assert len(ran) == 1 and ran[0]["result"]["isError"] is False, answers
    assert (tmp_path / "ws-cancel" / "again.txt").read_text() == "x"
    refused = [a for a in answers if a.get("id") == "codespace-front:initialize-replay"]
    assert len(refused) == 1 and refused[0]["error"]["code"] == -32600, answers
    assert "uses for a request of its own" in refused[0]["error"]["message"]


def test_json_that_python_takes_and_json_does_not_and_an_id_without_a_method(tmp_path):
    """Found by testing from outside: NaN and Infinity were taken as numbers, a valid id of 5,000
    digits was said not to be JSON, {"jsonrpc": "2.0", "id": 5} went unanswered, and a line with
    bytes that are not UTF-8 was answered without its id. Each gets an error that says what was
    wrong, with the id where the line's start shows it, and the next line is served."""
    done = serve_lines(tmp_path, "constants", [
        INIT, INITIALIZED,
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tally","arguments":{"name":NaN}}}',
        b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":-Infinity}}',
        b'{"jsonrpc":"2.0","id":' + b"7" * 5000 + b',"method":"ping"}',
        b'{"jsonrpc":"2.0","id":9996}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"tally","arguments":{"name":"\xff\xfe"}}}',
        {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    ])
    got = replies(done)
    errors = {i: json.loads(got[i][0] if i is None else got[i])["error"] for i in (2, 3, 5, None)}
    assert {e["code"] for e in errors.values()} == {-32700}, errors
    assert "NaN is not JSON" in errors[2]["message"] and "-Infinity is not JSON" in errors[3]["message"], errors
    assert "more digits than this server reads" in errors[None]["message"], errors  # no id it could read
    # Found by testing from outside: bytes that are not UTF-8 got an answer without the id, and the client hung.
    assert "not UTF-8 (byte 0xff at offset 92)" in errors[5]["message"], errors
    lone = json.loads(got[9996])["error"]
    assert lone["code"] == -32600 and '"method"' in lone["message"] and '"result"' in lone["message"], lone
    assert json.loads(got[4])["result"] == {}

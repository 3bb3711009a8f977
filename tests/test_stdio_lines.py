"""The stdio reader's line splitting (codespace.transports.stdio_fds.Lines): lines across any
chunking, the last line at end of input, and a line past the cap dropped as it arrives."""

from __future__ import annotations

import json
import random

import pytest
from codespace.transports import stdio_fds
from codespace.transports.stdio_fds import Lines
from codespace.transports.wire import TOO_LONG

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

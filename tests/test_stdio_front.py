"""The stdio front: what it answers itself must be byte for byte what the SDK answers, and no
line, however hostile, takes the server or the requests around it down. Real server
subprocesses over real pipes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from codespace.plugins import ENV_ALLOW
from codespace.transports.stdio import SETTLE_LIMIT_S

from .conftest import codespace_cmd, subprocess_env

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
# In `python -X importtime` output: the module that writes a listing, imported only by a start that builds one.
BUILT_LISTING = rb"\| +codespace\.transports\.tool_wire\b"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}


def serve_lines(tmp_path: Path, name: str, lines: list, *, direct: str = "1", state_home: Path | None = None,
                extra_env: dict[str, str] | None = None, python_flags: tuple[str, ...] = (),
                cwd: Path | None = None) -> subprocess.CompletedProcess:
    """One server, fed ``lines`` in a single write and then end of input."""
    ws = tmp_path / f"ws-{name}"
    ws.mkdir(exist_ok=True)
    wire = b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)
    env = subprocess_env(**{ENV_ALLOW: "example", "CODESPACE_DIRECT_CALLS": direct,
                            "XDG_STATE_HOME": str(state_home or tmp_path / f"xdg-{name}"), **(extra_env or {})})
    cmd = codespace_cmd()
    return subprocess.run([cmd[0], *python_flags, *cmd[1:], "serve", "--workspace", str(ws), "--state-dir",
                           str(tmp_path / f"state-{name}")], input=wire, capture_output=True, timeout=90, env=env,
                          cwd=cwd)


def replies(done: subprocess.CompletedProcess) -> dict:
    """Answers by id (id-less errors under None, in order); the raw line is kept."""
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    by_id: dict = {None: []}
    for raw in done.stdout.splitlines():
        message = json.loads(raw)
        if "id" not in message:
            continue  # notifications
        raw = re.sub(rb"op-[0-9a-f]{12}-[0-9a-f]{10}", b"op-X", raw)  # operation ids are random
        if message["id"] is None:
            by_id[None].append(raw)
        else:
            assert message["id"] not in by_id, f"two answers for {message['id']}"
            by_id[message["id"]] = raw
    return by_id


def same(front: bytes | list, sdk: bytes | list, key: object, *, parsed: bool) -> None:
    """Byte for byte; tool results (the direct path's, which orders keys its own way)
    after parsing."""
    if parsed:
        assert json.loads(front) == json.loads(sdk), key
    else:
        assert front == sdk, key


def test_protocol_constants_agree_with_the_sdk():
    from mcp_types import PROTOCOL_VERSION_META_KEY
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

    from codespace.transports import wire

    assert wire.HANDSHAKE_PROTOCOL_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert wire.MODERN_PROTOCOL_VERSIONS == MODERN_PROTOCOL_VERSIONS
    assert wire.LATEST_HANDSHAKE_VERSION == LATEST_HANDSHAKE_VERSION
    assert wire.PROTOCOL_VERSION_META_KEY == PROTOCOL_VERSION_META_KEY


SESSION = [
    INIT, INITIALIZED,
    {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}},
    {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}}},  # no name
    {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": 7}},
    {"jsonrpc": "2.0", "id": 7, "method": "resources/list"},
    {"jsonrpc": "2.0", "id": 8, "method": "no/such/method"},
    {"jsonrpc": "2.0", "id": "s", "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "b"}}},
    {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"cursor": "x"}},
    b"{not json",
    {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"},
    {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "read_file", "arguments": {
        "path": json.loads("[" * 100 + "]" * 100)}}},
]


MODERN_SESSION = [
    {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": ENVELOPE}},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "m"},
                                                                   "_meta": ENVELOPE}},
    {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": 5},
                                                                   "_meta": ENVELOPE}},
    {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}, "_meta": ENVELOPE}},
    {"jsonrpc": "2.0", "id": 6, "method": "ping", "params": {"_meta": ENVELOPE}},
]


def test_front_answers_the_same_bytes_as_the_sdk(tmp_path):
    """The SDK alone (CODESPACE_DIRECT_CALLS=0), the front with no cached listing, the front
    answering tools/list from the listing the previous start kept: the same bytes for every
    request, errors included."""
    shared = tmp_path / "xdg-shared"
    sdk = replies(serve_lines(tmp_path, "sdk", SESSION, direct="0"))
    cold = replies(serve_lines(tmp_path, "front", SESSION, state_home=shared))
    assert list((shared / "codespace" / "listings").glob("*.json")), "the listing was not kept"
    shutil.rmtree(tmp_path / "ws-front" / ".tally")  # the same start again, with only the listing kept
    warm = replies(serve_lines(tmp_path, "front", SESSION, state_home=shared))
    assert set(sdk) == set(cold) == set(warm)
    for key in sdk:
        same(cold[key], sdk[key], key, parsed=key == "s")
        same(warm[key], sdk[key], key, parsed=key == "s")
    modern_sdk = replies(serve_lines(tmp_path, "msdk", MODERN_SESSION, direct="0"))
    modern_front = replies(serve_lines(tmp_path, "mfront", MODERN_SESSION))
    assert set(modern_front) == set(modern_sdk)
    for key in modern_sdk:
        same(modern_front[key], modern_sdk[key], key, parsed=key in (3, 4))
    assert json.loads(modern_sdk[5])["error"]["data"]
    names = [t["name"] for t in json.loads(sdk[3])["result"]["tools"]]
    assert "tally" in names and "read_file" in names
    for request_id in (5, 6):
        error = json.loads(sdk[request_id])["error"]
        assert error["code"] == -32602 and "params.name" in error["data"], error  # says what was wrong


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2024-11-05", "2026-07-28", "1999-01-01"])
def test_initialize_answers_match_the_sdk_for_every_requested_version(tmp_path, version):
    init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}
    lines = [init, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    sdk = replies(serve_lines(tmp_path, "sdk", lines, direct="0"))
    front = replies(serve_lines(tmp_path, "front", lines))
    assert front == sdk
    assert json.loads(front[1])["result"]["protocolVersion"] in ("2025-11-25", version)


def test_a_modern_probe_then_a_classic_initialize_on_the_same_stream(tmp_path):
    """Claude Code probes with 2026-07-28 and, without an answer in time, sends initialize on
    the same connection: both eras are served there."""
    lines = [
        {"jsonrpc": "2.0", "id": "probe", "method": "server/discover", "params": {"_meta": ENVELOPE}},
        INIT, INITIALIZED,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "x"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": ENVELOPE}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "tally", "arguments": {"name": "x"}, "_meta": ENVELOPE}},
        {"jsonrpc": "2.0", "id": 6, "method": "resources/list"},
    ]
    got = {k: json.loads(v) for k, v in replies(serve_lines(tmp_path, "fallback", lines)).items() if k is not None}
    assert "2026-07-28" in got["probe"]["result"]["supportedVersions"]
    assert got[1]["result"]["protocolVersion"] == "2025-11-25", got[1]
    assert any(t["name"] == "tally" for t in got[2]["result"]["tools"])
    assert got[3]["result"]["structuredContent"]["count"] + got[5]["result"]["structuredContent"]["count"] == 3
    assert got[4]["result"]["resultType"] == "complete"
    assert got[6]["error"]["code"] == -32601  # the legacy SDK connection answers the rest


@pytest.mark.parametrize("direct", ["1", "0"])
def test_hostile_lines_get_errors_and_spare_their_neighbours(tmp_path, direct):
    """Deep nesting (a RecursionError in the parser used to end the server), ids that are
    objects, arrays or booleans, batches, non-JSON-RPC values: each gets a JSON-RPC error,
    and the valid requests in the same write are all answered."""
    deep_call = ('{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"read_file","arguments":{"path":'
                 + "[" * 15000 + "]" * 15000 + "}}}").encode()
    lines = [
        INIT, INITIALIZED,
        b"[" * 100000 + b"]" * 100000,
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        deep_call,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "n"}}},
        b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
        b'{"jsonrpc":"2.0","id":[1],"method":"ping"}',
        b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
        b'[{"jsonrpc":"2.0","id":41,"method":"ping"}]',
        b'"just a string"', b"42", b"null",
        b'{"jsonrpc":"2.0","id":42,"method":17}',
        b'{"id":43,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"tally","arguments":' + b'{"a":' * 70
        + b"1" + b"}" * 70 + b"}}",
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "n"}}},
    ]
    got = replies(serve_lines(tmp_path, f"hostile-{direct}", lines, direct=direct))
    assert json.loads(got[2])["result"] == {}
    counts = sorted(json.loads(got[i])["result"]["structuredContent"]["count"] for i in (3, 4))
    assert counts == [1, 2]
    errors = [json.loads(raw)["error"] for raw in got[None]]
    assert len(errors) == 10, errors
    assert sum("nests deeper than 64 levels" in e["message"] for e in errors) == 2
    assert sum('"id" must be a string or an integer' in e["message"] for e in errors) == 3
    assert all(e["code"] in (-32600, -32700) for e in errors)
    assert json.loads(got[42])["error"]["code"] == -32600
    assert "nests deeper" in json.loads(got[44])["error"]["message"]  # an id it could read is kept


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_null_id_a_notification_with_an_id_and_params_not_an_object_are_named(tmp_path, direct):
    """Found by testing from outside: a ping with id null got a result (MCP forbids null ids, and a
    client cannot tell that answer from an error's), a notification sent with an id got no answer
    at all, and params given as an array got "4 validation errors for union[...]"."""
    lines = [
        INIT, INITIALIZED,
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 43, "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 44, "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "id": 46, "method": "tools/call", "params": [1, 2]},
        {"jsonrpc": "2.0", "id": 47, "method": "tools/list", "params": "x"},
        {"jsonrpc": "2.0", "id": 48, "method": "tools/call", "params": {"name": "y" * 100_000, "arguments": {}}},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    ]
    got = replies(serve_lines(tmp_path, f"ids-{direct}", lines, direct=direct))
    assert json.loads(got[2])["result"] == {}
    (null,) = [json.loads(raw)["error"] for raw in got[None]]
    assert null["code"] == -32600 and '"id" is null, which MCP does not allow' in null["message"], null
    for request_id, method in ((43, "notifications/initialized"), (44, "notifications/cancelled")):
        error = json.loads(got[request_id])["error"]
        assert error["code"] == -32600 and f"'{method}' is a notification, which carries no \"id\"" in error["message"]
    for request_id, kind in ((46, "an array"), (47, "a string")):
        error = json.loads(got[request_id])["error"]
        assert error["code"] == -32602 and f"must be an object (MCP passes parameters by name), not {kind}" \
            in error["message"], error
    assert len(got[48]) < 2000, len(got[48])  # the unknown name is not echoed whole


@pytest.mark.parametrize("direct", ["1", "0"])
def test_an_id_with_a_lone_surrogate_gets_an_error_not_the_end_of_the_server(tmp_path, direct):
    """JSON lets a string id hold ``\\ud800``, which no UTF-8 reply can carry: the first line of a
    connection with one used to end the server (UnicodeEncodeError writing the answer); later, a
    ping or tools/list got -32603 with id null. Each such request gets -32600 naming the rule, at
    any point of the connection, and everything after it is served."""
    def ping(request_id: str) -> bytes:
        return b'{"jsonrpc":"2.0","id":"' + request_id.encode() + b'","method":"ping"}'

    lines = [
        ping("\\ud800"),
        b'{"jsonrpc":"2.0","id":"\\udc00","method":"initialize","params":' + json.dumps(INIT["params"]).encode() + b"}",
        INIT, INITIALIZED,
        b'{"jsonrpc":"2.0","id":"a\\udfff","method":"tools/list"}',
        ping("\\ud800"),
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call","params":{"name":"tally","arguments":{"name":"n"}}}',
        b'{"jsonrpc":"2.0","id":"\\ud800","result":{}}',  # a response to nothing: no answer
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": "\u00e9\U0001f600", "method": "ping"},  # a pair, escaped: a valid id
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {"name": "n"}}},
    ]
    got = replies(serve_lines(tmp_path, f"surrogate-id-{direct}", lines, direct=direct))
    errors = [json.loads(raw)["error"] for raw in got[None]]
    assert len(errors) == 5, errors
    for error in errors:
        assert error["code"] == -32600 and '"id" holds a lone surrogate' in error["message"], error
    assert json.loads(got[1])["result"]["protocolVersion"] == "2025-11-25"
    assert json.loads(got[2])["result"] == {} and json.loads(got["\u00e9\U0001f600"])["result"] == {}
    assert json.loads(got[3])["result"]["structuredContent"]["count"] == 1


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_cancellation_naming_no_valid_request_gets_no_answer(tmp_path, direct):
    """A notification is never answered: a requestId that is an array or an object (unhashable)
    used to come back as -32603 Internal error."""
    lines = [INIT, INITIALIZED, *({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": bad}}
                                  for bad in ([1], {"a": 1}, None, True, 1.5)),
             {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]},
             {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    done = serve_lines(tmp_path, f"cancel-{direct}", lines, direct=direct)
    got = replies(done)
    assert got[None] == [] and set(got) == {None, 1, 2}, got
    assert b"unhashable" not in done.stderr, done.stderr.decode()[-2000:]


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_refused_initialize_does_not_change_what_later_errors_say(tmp_path, direct):
    """An initialize the SDK refuses (protocolVersion 5) left its version on the connection,
    and later -32602 hints said "tools/list is not served at protocol version 5"."""
    bad_list = {"jsonrpc": "2.0", "method": "tools/list", "params": {"cursor": {}}}
    lines = [INIT, INITIALIZED, {**bad_list, "id": 2},
             {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 5}},
             {**bad_list, "id": 4}]
    got = replies(serve_lines(tmp_path, f"reinit-{direct}", lines, direct=direct))
    assert json.loads(got[3])["error"]["code"] == -32602
    before, after = (json.loads(got[i])["error"] for i in (2, 4))
    assert before == after and "params.cursor" in before["data"], (before, after)


def test_lone_surrogates_get_an_error_naming_the_argument_from_every_tool(tmp_path):
    """Every tool, every string argument: ``\\udcff`` is refused with the argument's name
    (it used to reach os calls and end as -32603 Internal error)."""
    listing = replies(serve_lines(tmp_path, "list", [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2,
                                                                       "method": "tools/list"}]))
    tools = json.loads(listing[2])["result"]["tools"]
    calls, expected = [], {}
    for tool in tools:
        for prop, schema in tool["inputSchema"].get("properties", {}).items():
            kinds = schema.get("type")
            kinds = kinds if isinstance(kinds, list) else [kinds]
            if "string" in kinds or "enum" in schema:
                request_id = len(calls) + 100
                calls.append({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                              "params": {"name": tool["name"], "arguments": {prop: "w\udcff.txt"}}})
                expected[request_id] = (tool["name"], prop)
    assert len({name for name, _ in expected.values()}) >= 15, "too few tools with string arguments"
    wire = [INIT, INITIALIZED, *(json.dumps(c).encode() for c in calls)]
    got = replies(serve_lines(tmp_path, "surrogates", wire))
    for request_id, (tool, prop) in expected.items():
        result = json.loads(got[request_id])["result"]
        assert result["isError"] is True, (tool, prop)
        text = result["content"][0]["text"]
        assert f"argument '{prop}' holds a lone surrogate" in text and tool in text, text


def test_a_request_the_sdk_cannot_parse_does_not_hold_up_the_exit(tmp_path):
    """Its JSON-RPC error is the answer: at end of input the server stops at once (it used to
    wait SETTLE_LIMIT_S for an answer to that request)."""
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "tally",
                                                                         "arguments": {"name": "w\udcff"}}}
    started = time.monotonic()
    got = replies(serve_lines(tmp_path, "unparsed", [INIT, INITIALIZED, json.dumps(call).encode()], direct="0"))
    assert json.loads(got[5])["error"]["code"] == -32600
    assert time.monotonic() - started < SETTLE_LIMIT_S / 2


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_file_name_that_is_not_utf8_is_listed_not_fatal(tmp_path, direct):
    """A name on disk that is not UTF-8 (Python decodes it to a lone surrogate) is listed on
    both paths, and the server goes on."""
    ws = tmp_path / f"ws-names-{direct}"
    ws.mkdir()
    with open(os.path.join(os.fsencode(ws), b"w\xff.txt"), "wb") as f:
        f.write(b"x")
    lines = [INIT, INITIALIZED,
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_dir", "arguments": {}}},
             {"jsonrpc": "2.0", "id": 3, "method": "ping"}]
    got = replies(serve_lines(tmp_path, f"names-{direct}", lines, direct=direct,
                              extra_env={ENV_ALLOW: "example,fs"}))
    listed = json.loads(got[2])["result"]
    assert listed["isError"] is False, listed
    assert "w\\xff.txt" in listed["content"][0]["text"]
    assert json.loads(got[3])["result"] == {}


def test_a_warm_start_answers_without_importing_the_sdk(tmp_path):
    """With the listing kept from an earlier start, a session of initialize, tools/list and
    tool calls never imports the MCP SDK (``python -X importtime`` lists every import)."""
    shared = tmp_path / "xdg"
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
               {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tally", "arguments": {}}}]
    here = tmp_path / "cwd"  # python -m puts the current directory on sys.path; agents write there
    here.mkdir()
    cold = serve_lines(tmp_path, "imports", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    # A cold start builds the listing itself (tool_wire), with neither the SDK's server nor its models.
    assert re.search(BUILT_LISTING, cold.stderr), "the cold start should have built the listing"
    assert not re.search(rb"\| +mcp_types\b", cold.stderr), "the cold start imported the SDK's protocol models"
    assert not re.search(rb"\| +(mcp|starlette|uvicorn)(\.|\n)", cold.stderr), "the cold start imported the SDK"
    (here / "notes.txt").write_text("a file the agent wrote\n")
    warm = serve_lines(tmp_path, "imports", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert replies(warm)[2] == replies(cold)[2]
    imported = re.findall(rb"\| +([\w.]+)\n", warm.stderr)
    assert imported, "no import times captured"
    assert not [m for m in imported if m.split(b".")[0] in (b"mcp", b"mcp_types", b"uvicorn", b"starlette")]


def test_a_changed_policy_is_not_served_a_stale_listing(tmp_path):
    shared = tmp_path / "xdg"
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    before = json.loads(replies(serve_lines(tmp_path, "policy", session, state_home=shared))[2])
    assert "tally" in [t["name"] for t in before["result"]["tools"]]
    policy = tmp_path / "ws-policy" / ".codespace"
    policy.mkdir()
    (policy / "policy.toml").write_text('[plugins]\nblock = ["example"]\n')
    after = json.loads(replies(serve_lines(tmp_path, "policy", session, state_home=shared))[2])
    assert "tally" not in [t["name"] for t in after["result"]["tools"]]


def test_a_policy_edited_outside_its_plugins_table_starts_warm(tmp_path):
    """The listing depends on the policy only through which plugins load (tests/test_listing_keys.py):
    an edit elsewhere in the policy is answered from the kept listing, without building it; an edit
    of ``[plugins]`` is not."""
    shared = tmp_path / "xdg"
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    policy = tmp_path / "ws-edit" / ".codespace" / "policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text('[limits]\nmax_read_bytes = 65536\n')
    here = tmp_path / "cwd"
    here.mkdir()
    first = serve_lines(tmp_path, "edit", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert re.search(BUILT_LISTING, first.stderr)
    policy.write_text('[limits]\nmax_read_bytes = 8192\n\n[commands]\ndefault = "deny"\n')
    edited = serve_lines(tmp_path, "edit", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert replies(edited)[2] == replies(first)[2]
    assert not re.search(BUILT_LISTING, edited.stderr), "an edit outside [plugins] should have started warm"
    policy.write_text('[limits]\nmax_read_bytes = 8192\n\n[plugins]\nblock = ["example"]\n')
    blocked = serve_lines(tmp_path, "edit", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert re.search(BUILT_LISTING, blocked.stderr), "an edit of [plugins] must build its own listing"
    assert "tally" not in [t["name"] for t in json.loads(replies(blocked)[2])["result"]["tools"]]
    policy.write_text('[limits]\nmax_read_bytes = "not TOML\n')  # not TOML: no second key; the App says why
    broken = serve_lines(tmp_path, "edit", session, state_home=shared)
    assert broken.returncode != 0 and b"policy" in broken.stderr and 2 not in replies_allowing_exit(broken)


def replies_allowing_exit(done: subprocess.CompletedProcess) -> dict:
    return {json.loads(raw).get("id"): raw for raw in done.stdout.splitlines()}


def test_a_planted_listing_with_other_tools_is_dropped(tmp_path):
    """If the kept listing disagrees with the registry (it names other tools), the server
    drops it once the App is built, and the next start builds it again."""
    shared = tmp_path / "xdg"
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    first = replies(serve_lines(tmp_path, "plant", session, state_home=shared))[2]
    kept = list((shared / "codespace" / "listings").glob("*.json"))
    assert len(kept) == 2  # under the policy's bytes and under its [plugins] table
    for copy in kept:
        record = json.loads(copy.read_text())
        record["names"] = ["not_a_tool"]
        copy.write_text(json.dumps(record))
    serve_lines(tmp_path, "plant", session, state_home=shared)
    assert not any(copy.exists() for copy in kept)
    assert replies(serve_lines(tmp_path, "plant", session, state_home=shared))[2] == first


def test_a_new_workspace_with_the_same_policy_starts_warm(tmp_path):
    """The listing depends on the policy and the installed code, not on the workspace: a first
    start in another workspace (no policy file in either) is answered from the kept listing,
    without the SDK; one with a policy of its own builds its own."""
    shared = tmp_path / "xdg"
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    here = tmp_path / "cwd"
    here.mkdir()
    first = serve_lines(tmp_path, "one", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert re.search(BUILT_LISTING, first.stderr)
    other = serve_lines(tmp_path, "two", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert replies(other)[2] == replies(first)[2]
    assert not re.search(BUILT_LISTING, other.stderr), "a new workspace should have started warm"
    own = tmp_path / "ws-three" / ".codespace"
    own.mkdir(parents=True)
    (own / "policy.toml").write_text('[plugins]\nblock = ["example"]\n')
    third = serve_lines(tmp_path, "three", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert re.search(BUILT_LISTING, third.stderr), "a workspace with its own policy must not reuse the listing"
    assert "tally" not in [t["name"] for t in json.loads(replies(third)[2])["result"]["tools"]]


def test_prepare_makes_the_first_start_warm(tmp_path):
    """`codespace prepare` (after an install or a policy change) runs the cold start itself, so
    the client's first start answers tools/list from the kept listing, without the SDK."""
    shared = tmp_path / "xdg"
    here = tmp_path / "cwd"
    here.mkdir()
    ws = tmp_path / "ws-prepared"
    ws.mkdir()
    # The same CODESPACE_* environment as the server below (serve_lines sets these): it keys the listing.
    env = subprocess_env(**{ENV_ALLOW: "example", "CODESPACE_DIRECT_CALLS": "1", "XDG_STATE_HOME": str(shared)})
    done = subprocess.run([*codespace_cmd(), "prepare", "--workspace", str(ws)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=here)
    assert done.returncode == 0, done.stderr
    assert "tools listed" in done.stderr and "tally" in done.stderr
    session = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    first = serve_lines(tmp_path, "prepared", session, state_home=shared, python_flags=("-X", "importtime"), cwd=here)
    assert "tally" in [t["name"] for t in json.loads(replies(first)[2])["result"]["tools"]]
    assert not re.search(BUILT_LISTING, first.stderr), "the prepared start should have been warm"

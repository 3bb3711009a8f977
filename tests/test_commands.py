"""Commands on pipes through real MCP sessions: real processes, /proc checked."""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import time

import anyio
import pytest

from codespace.processes.kill import members
from codespace.testing import call_error, call_ok, connect, structured

from .servers import alive

pytestmark = pytest.mark.anyio

GRANDCHILDREN_IGNORING_TERM = (
    "trap '' TERM; "
    "(trap '' TERM; sleep 1000) & "
    "(trap '' TERM; exec -a cs-grandchild sleep 1000) & "
    "setsid -f sleep 1 >/dev/null 2>&1; "  # leaves the session on purpose and ends by itself
    "echo $$ > pgid; wait"
)


def _live_members(leader: int) -> list[int]:
    return [p for p in members(leader) if alive(p)]


async def test_exec_argv_and_shell(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": ["echo", "hello world"]})
        assert out["output"] == "hello world\n" and out["exit_code"] == 0 and out["session_id"] is None
        shell = await call_ok(client, "exec", {"command": "echo a; echo b >&2; exit 3"})
        assert shell["exit_code"] == 3 and sorted(shell["output"].split()) == ["a", "b"]
        separate = await call_ok(client, "exec", {"command": "echo a; echo b >&2", "separate_stderr": True})
        assert separate["output"] == "a\n" and separate["stderr"] == "b\n"
        missing = await call_error(client, "exec", {"command": ["no-such-program-xyz"]})
        assert missing["code"] == "command_not_found" and "PATH" in missing["message"]
        bad_cwd = await call_error(client, "exec", {"command": ["true"], "cwd": "nope"})
        assert "does not exist" in bad_cwd["message"]


async def test_cwd_env_and_stdin(make_app, ws, mode, monkeypatch):
    (ws / "sub").mkdir()
    monkeypatch.setenv("SERVER_SECRET_TOKEN", "leak")
    monkeypatch.setenv("EDITOR_CHOICE", "vi")
    policy = '[env]\ninherit = "all"\nset = { FROM_POLICY = "p" }\n'
    async with connect(make_app(policy), mode=mode) as client:
        out = await call_ok(client, "exec", {
            "command": "pwd; echo ${SERVER_SECRET_TOKEN:-none} $EDITOR_CHOICE $FROM_POLICY $MINE ${MY_API_KEY:-dropped}",
            "cwd": "sub", "env": {"MINE": "m", "MY_API_KEY": "k"},
        })
        lines = out["output"].splitlines()
        assert lines[0] == str((ws / "sub").resolve())
        assert lines[1] == "none vi p m dropped"
        assert out["env_dropped"] == ["MY_API_KEY"]
        fed = await call_ok(client, "exec", {"command": ["cat"], "stdin": "typed\n"})
        assert fed["output"] == "typed\n" and fed["exit_code"] == 0
        devnull = await call_ok(client, "exec", {"command": "cat; echo eof"})
        assert devnull["output"] == "eof\n"  # stdin is /dev/null, so cat cannot hang


async def test_timeout_kills_the_whole_group(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        start = time.monotonic()
        out = await call_ok(client, "exec", {"command": GRANDCHILDREN_IGNORING_TERM, "timeout_ms": 700})
        assert time.monotonic() - start < 5
    assert out["timed_out"] is True and out["exit_code"] == 124
    leader = int((ws / "pgid").read_text())
    assert _live_members(leader) == []


async def test_terminate_escalates_and_leaves_nothing(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        started = await call_ok(client, "exec", {"command": GRANDCHILDREN_IGNORING_TERM, "yield_ms": 300})
        assert started["running"] is True
        leader = started["pid"]
        assert len(_live_members(leader)) >= 3
        stopped = await call_ok(client, "terminate", {"session_id": started["session_id"], "grace_ms": 300})
        assert stopped["running"] is False and stopped["signal"] == "SIGKILL"
        assert _live_members(leader) == []
        gone = await call_error(client, "read_output", {"session_id": started["session_id"]})
        assert gone["code"] == "no_session"


async def test_yield_returns_on_exit_not_at_the_deadline(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        start = time.monotonic()
        out = await call_ok(client, "exec", {"command": "sleep 0.2; echo done", "yield_ms": 30000})
        assert out["output"] == "done\n" and time.monotonic() - start < 3
        start = time.monotonic()
        session = await call_ok(client, "exec", {"command": "echo ready; cat", "interactive": True, "yield_ms": 30000})
        assert session["running"] and session["output"] == "ready\n"
        assert time.monotonic() - start < 3  # printed, then went quiet: it waits for input
        start = time.monotonic()
        echoed = await call_ok(client, "write_stdin", {"session_id": session["session_id"], "chars": "ping\n", "yield_ms": 30000})
        assert echoed["output"] == "ping\n" and time.monotonic() - start < 3
        polled = await call_ok(client, "read_output", {"session_id": session["session_id"], "wait_ms": 200})
        assert polled["output"] == ""
        await call_ok(client, "terminate", {"session_id": session["session_id"]})


async def test_cursor_reads_are_exact(make_app, mode):
    script = "for i in $(seq 1 5); do echo line$i; sleep 0.1; done"
    async with connect(make_app(), mode=mode) as client:
        first = await call_ok(client, "exec", {"command": script, "yield_ms": 150})
        session = first["session_id"]
        seen = first["output"]
        cursor = first["next_seq"]
        while True:
            step = await call_ok(client, "read_output", {"session_id": session, "after_seq": cursor, "wait_ms": 2000})
            assert step["seq"] == cursor and step["omitted_bytes"] == 0
            seen += step["output"]
            cursor = step["next_seq"]
            if not step["running"] and step["session_id"] is None:
                break
        assert seen == "".join(f"line{i}\n" for i in range(1, 6))
        again = await call_ok(client, "exec", {"command": "printf 'abcdef'", "max_bytes": 2})
        rest = await call_ok(client, "read_output", {"session_id": again["session_id"], "after_seq": 2, "max_bytes": 100})
        assert again["output"] == "ab" and rest["output"] == "cdef" and rest["seq"] == 2


async def test_utf8_is_never_split(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "printf 'é€😀'", "max_bytes": 2})
        text, cursor = out["output"], out["next_seq"]
        while out["session_id"]:
            out = await call_ok(client, "read_output", {"session_id": out["session_id"], "after_seq": cursor, "max_bytes": 3})
            text += out["output"]
            cursor = out["next_seq"]
            assert "\ufffd" not in out["output"]
        assert text == "é€😀"


async def test_head_tail_buffer_counts_the_middle(make_app, mode):
    policy = "[limits]\noutput_cap_bytes = 4096\n"
    async with connect(make_app(policy), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "seq 1 20000", "max_bytes": 1_000_000})
    total = sum(len(f"{i}\n") for i in range(1, 20001))
    text = out["output"]
    assert text.startswith("1\n2\n3\n") and text.endswith("19999\n20000\n")
    assert f"... {out['omitted_bytes']} bytes omitted ..." in text
    assert out["omitted_bytes"] == total - 4096


async def test_a_character_cut_by_the_dropped_middle_does_not_hold_the_cursor(make_app, mode):
    """Found by testing from outside: when the head's end cut a 3-byte character, read_output
    from there returned nothing forever (a client following next_seq looped), and the tail's
    first bytes read as U+FFFD. The cut bytes are counted with the omitted middle."""
    policy = "[limits]\noutput_cap_bytes = 4096\n"  # a head of 2048 bytes: 682 characters and 2 bytes
    script = "python3 -c \"import sys; sys.stdout.write('€' * 5000); sys.stdout.flush()\"; echo; echo TAILEND"
    async with connect(make_app(policy), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": script, "max_bytes": 1000, "timeout_ms": 30000,
                                              "yield_ms": 10000})
        text, cursor, steps = out["output"], out["next_seq"], 0
        while out["session_id"] is not None or out["running"]:
            out = await call_ok(client, "read_output", {"session_id": out["session_id"], "after_seq": cursor,
                                                        "max_bytes": 1000})
            assert out["next_seq"] > cursor or not out["running"], out  # never stuck
            text, cursor, steps = text + out["output"], out["next_seq"], steps + 1
            assert steps < 50, text[-300:]
    total = 5000 * 3 + len("\nTAILEND\n")
    assert cursor == total and "\ufffd" not in text, text[-200:]
    head, _, rest = text.partition("... ")
    omitted, _, tail = rest.partition(" bytes omitted ...\n")
    assert head == "€" * 682 and tail.endswith("€\nTAILEND\n") and set(tail[:-len("\nTAILEND\n")]) == {"€"}
    assert len(head.encode()) + int(omitted) + len(tail.encode()) == total


async def test_a_cursor_past_the_end_is_refused_by_name(make_app, mode):
    """Found by testing from outside: after_seq=1000 over 6 bytes moved the session's cursor
    there, and what the command wrote next was never shown."""
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "echo first; sleep 0.5; echo second", "yield_ms": 200})
        error = await call_error(client, "read_output", {"session_id": out["session_id"], "after_seq": 1000})
        rest = await call_ok(client, "read_output", {"session_id": out["session_id"], "wait_ms": 3000})
    assert error["code"] == "invalid_argument" and error["details"]["argument"] == "after_seq", error
    assert "next_seq 6" in error["message"], error
    assert out["output"] + rest["output"] == "first\nsecond\n"


async def test_100mb_stream_lossless_exact_and_memory_bounded(make_app, mode):
    size = 100 * 1024 * 1024
    producer = (
        "import sys\n"
        "block = bytes(range(32, 127)) * 700 + b'\\n'\n"
        f"left = {size}\n"
        "while left > 0:\n"
        "    chunk = block[:left]\n"
        "    sys.stdout.buffer.write(chunk)\n"
        "    left -= len(chunk)\n"
    )
    block = bytes(range(32, 127)) * 700 + b"\n"
    expected = hashlib.sha256()
    left = size
    while left > 0:
        expected.update(block[:left])
        left -= len(block[:left])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    digest = hashlib.sha256()
    received = 0
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {
            "command": [sys.executable, "-c", producer], "lossless": True, "yield_ms": 100,
            "max_bytes": 1024 * 1024, "timeout_ms": 600_000,
        })
        cursor = 0
        while True:
            assert out["seq"] == cursor and out["omitted_bytes"] == 0, "a byte was lost or repeated"
            data = out["output"].encode()
            digest.update(data)
            received += len(data)
            cursor = out["next_seq"]
            if out["session_id"] is None:
                break
            out = await call_ok(client, "read_output", {
                "session_id": out["session_id"], "after_seq": cursor, "max_bytes": 1024 * 1024, "wait_ms": 2000,
            })
    assert received == size
    assert digest.hexdigest() == expected.hexdigest()
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert growth_mb < 60, f"peak memory grew by {growth_mb:.0f} MB for a 1 MiB buffer"


async def test_eviction_protects_recent_sessions(make_app, mode):
    policy = "[limits]\nmax_sessions = 12\n"

    async def sleeper() -> str:
        return (await call_ok(client, "exec", {"command": ["sleep", "100"], "yield_ms": 0}))["session_id"]

    async def live() -> list[str]:
        return [s["session_id"] for s in (await call_ok(client, "list_sessions"))["sessions"]]

    async with connect(make_app(policy), mode=mode) as client:
        a, b = await sleeper(), await sleeper()
        # exited, but it keeps unread output, so it stays until evicted
        finished = (await call_ok(client, "exec", {"command": "echo xy", "max_bytes": 1, "yield_ms": 2000}))["session_id"]
        rest = [await sleeper() for _ in range(9)]
        assert len(await live()) == 12
        await sleeper()  # full: the least recently used *exited* session goes first, though a and b are older
        sessions = await live()
        assert finished not in sessions and a in sessions and len(sessions) == 12
        await call_ok(client, "read_output", {"session_id": a})  # a becomes the most recently used
        await sleeper()  # no exited candidate: the least recently used running one (b) is killed
        sessions = await live()
        assert b not in sessions and a in sessions and rest[0] in sessions
        assert (await call_error(client, "read_output", {"session_id": b}))["code"] == "no_session"


async def test_eviction_never_kills_a_command_whose_exec_call_is_still_waiting(make_app, mode):
    """Found by testing from outside: 100 exec calls sent at once under the default 64 sessions, and
    7 answered exit 137 (SIGKILL): each new one evicted a command whose call had not returned yet.
    Those are never evicted now; a call that finds no room is refused, saying why and what to do."""
    policy = "[limits]\nmax_sessions = 10\n"
    results: list[dict] = []

    async def one(n: int) -> None:
        result = await client.call_tool("exec", {"command": ["sh", "-c", f"sleep 2; echo done{n}"], "yield_ms": 30000})
        results.append({"error": result.content[0].text} if result.is_error else structured(result))

    async with connect(make_app(policy), mode=mode) as client:
        async with anyio.create_task_group() as tg:
            for n in range(16):
                tg.start_soon(one, n)
        after = await call_ok(client, "exec", {"command": ["echo", "still serving"]})
    finished = [r for r in results if "error" not in r]
    refused = [r["error"] for r in results if "error" in r]
    assert all(r["exit_code"] == 0 and r.get("signal") is None and r["output"].startswith("done") for r in finished), finished
    assert len(finished) >= 10 and len(finished) + len(refused) == 16, (len(finished), refused)
    assert all("limits.max_sessions" in text and "nothing was started" in text for text in refused), refused
    assert after["output"] == "still serving\n"


async def test_seventy_sessions_with_the_default_limit(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        pids = []
        for _ in range(70):
            started = await call_ok(client, "exec", {"command": ["sleep", "100"], "yield_ms": 0})
            pids.append(started["pid"])
        listing = await call_ok(client, "list_sessions")
        assert len(listing["sessions"]) == 64 and listing["limit"] == 64
        await anyio.sleep(0.2)
        assert [p for p in pids[:6] if alive(p)] == []  # the six evicted were killed
        assert all(alive(p) for p in pids[6:])
    assert [p for p in pids if alive(p)] == []  # clean shutdown terminates every session


async def test_replayed_exec_reattaches_and_record_finishes(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        first = await call_ok(client, "exec", {"command": "sleep 0.5; echo end", "yield_ms": 0, "operation_id": "x1"})
        again = await call_ok(client, "exec", {"command": "sleep 0.5; echo end", "yield_ms": 0, "operation_id": "x1"})
        assert again["replayed"] and again["session_id"] == first["session_id"] and again["pid"] == first["pid"]
        record = await call_ok(client, "get_operation", {"operation_id": "x1"})
        assert record["status"] == "running"
        done = await call_ok(client, "read_output", {"session_id": first["session_id"], "wait_ms": 5000})
        while done["running"]:
            done = await call_ok(client, "read_output", {"session_id": first["session_id"], "wait_ms": 5000})
        await anyio.sleep(0.1)
        record = await call_ok(client, "get_operation", {"operation_id": "x1"})
        assert record["status"] == "succeeded" and record["result"]["exit_code"] == 0


async def test_command_rules_and_required_sandbox_refuse(make_app, mode):
    policy = '[commands]\nrules = [{ program = "rm", decision = "deny" }]\n[sandbox]\nmode = "off"\n'
    async with connect(make_app(policy), mode=mode) as client:
        refused = await call_error(client, "exec", {"command": "ls && rm -rf x"})
        assert refused["rule"] == "commands.rules[0]"
        ok = await call_ok(client, "exec", {"command": ["true"]})
        assert ok["sandboxed"] is False and "sandbox.mode = 'off'" in ok["note"]
    async with connect(make_app('[sandbox]\nmode = "required"\n', plugins=()), mode=mode) as client:
        refused = await call_error(client, "exec", {"command": ["true"]})
        assert refused["rule"] == "sandbox.mode" and "required" in refused["message"]


async def test_session_tools_validate(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        assert (await call_error(client, "write_stdin", {"session_id": "nope", "chars": "x"}))["code"] == "no_session"
        plain = await call_ok(client, "exec", {"command": ["sleep", "5"], "yield_ms": 0})
        no_stdin = await call_error(client, "write_stdin", {"session_id": plain["session_id"], "chars": "x"})
        assert "interactive" in no_stdin["message"]
        not_tty = await call_error(client, "resize", {"session_id": plain["session_id"], "rows": 10, "cols": 10})
        assert not_tty["code"] == "not_a_terminal"
        empty = await call_error(client, "exec", {"command": []})
        assert empty["code"] == "invalid_arguments"
        nul = await call_error(client, "exec", {"command": ["echo", "a\0b"]})
        assert "NUL" in nul["message"]
        await call_ok(client, "terminate", {"session_id": plain["session_id"], "signal": "KILL"})


@pytest.mark.in_process
async def test_sandbox_fast_path_is_used_for_pipes(make_app, mode):
    from codespace_fakesandbox import FakeSandbox

    app = make_app(plugins=("fakesandbox",))
    async with connect(app, mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "echo $SANDBOX_PATH; cat", "stdin": "fed\n"})
        assert out["output"] == "launch\nfed\n" and out["sandboxed"] is True and out["exit_code"] == 0
        session = await call_ok(client, "exec", {"command": ["cat"], "interactive": True, "yield_ms": 0})
        echoed = await call_ok(client, "write_stdin", {"session_id": session["session_id"], "chars": "ping\n"})
        assert echoed["output"] == "ping\n"
        stopped = await call_ok(client, "terminate", {"session_id": session["session_id"]})
        assert stopped["running"] is False
    assert FakeSandbox.launched and all(p.released for p in FakeSandbox.launched)


async def test_a_command_that_sigkills_itself_under_the_keeper(make_app, mode, monkeypatch):
    """Found by testing: the keeper reset SIGKILL's handler before passing the signal on, which
    Python refuses; it exited 1 with a traceback instead of ending as its command did."""
    monkeypatch.setenv("CODESPACE_CGROUP", "off")
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "echo before; kill -9 $$", "separate_stderr": True})
        # After a command: with a worker, its tracker is reported once it serves.
        info = await call_ok(client, "workspace_info")
        assert info["sandbox"]["process_tracking"]["mechanism"] == "subreaper", info["sandbox"]
        assert out["output"] == "before\n" and "Traceback" not in (out["stderr"] or ""), out
        assert (out["exit_code"], out["signal"]) == (137, "SIGKILL"), out


@pytest.mark.parametrize("tty", [False, True])
async def test_a_command_line_too_long_for_linux_is_refused_naming_the_part(make_app, mode, tty):
    """Found by testing: the E2BIG came from whatever ran first (the sandbox's launcher, the
    cgroup stub) and named it, not the argument that was too long."""
    async with connect(make_app(), mode=mode) as client:
        one = await call_error(client, "exec", {"command": ["echo", "x" * 200_000], "tty": tty})
        assert one["code"] == "invalid_arguments" and "argument 1 is 200000 bytes" in one["message"], one
        script = await call_error(client, "exec", {"command": "echo " + "y" * 200_000, "tty": tty})
        assert "the shell script is 200005 bytes" in script["message"] and "To proceed" in script["message"]
        many = await call_error(client, "exec", {"command": ["echo", *["z" * 100_000] * 40], "tty": tty})
        assert "(ARG_MAX)" in many["message"], many
        # Found by testing from outside: an environment entry passed the check and bwrap's execvp failed.
        env = await call_error(client, "exec", {"command": ["true"], "env": {"BIG": "v" * 200_000}, "tty": tty})
        assert "the environment variable 'BIG' is 200004 bytes" in env["message"] and "MAX_ARG_STRLEN" in env["message"], env
        name = await call_error(client, "exec", {"command": ["true"], "env": {"N" * 200_000: "v"}, "tty": tty})
        assert f"the environment variable {'N' * 40!r}... is 200002 bytes" in name["message"], name
        fine = await call_ok(client, "exec", {"command": ["echo", "x" * 100_000], "yield_ms": 10_000})
        assert len(fine["output"].strip()) == 100_000


async def test_workspace_info_says_who_unsandboxed_commands_run_as(make_app, mode):
    """Found by testing from outside: with sandbox.mode = 'off' a root server ran commands as root
    while the sandbox's detail said only what the engine would do ("never host root")."""
    async with connect(make_app('[sandbox]\nmode = "off"\n'), mode=mode) as client:
        await call_ok(client, "exec", {"command": ["true"]})  # a worker, if one is set, serves from here on
        detail = (await call_ok(client, "workspace_info"))["sandbox"]["detail"]
        remote = (await call_ok(client, "workspace_info"))["runtime"].get("commands") == "worker"
        who = (await call_ok(client, "exec", {"command": ["id", "-u"]}))["output"].strip()
    assert detail.startswith("sandbox.mode = 'off': commands run unsandboxed, as "), detail
    if remote:
        assert "as the worker's user" in detail, detail
    elif who == "0":
        assert "as root, with every power of host root" in detail, detail
    else:
        assert f"as the server's own uid {who}" in detail, detail


@pytest.mark.parametrize("tracking", ["cgroup", "subreaper"])
async def test_what_a_command_leaves_behind_ends_with_it(make_app, mode, monkeypatch, tracking):
    """Found by testing: as root without a sandbox (cgroup tracking) a background process outlived
    its command, held the output open for the 2 s drain, and ran on past the command's timeout;
    the keeper and the sandbox's PID namespace end it with the command."""
    if tracking == "subreaper":
        monkeypatch.setenv("CODESPACE_CGROUP", "off")
    tag = f"cs-left-{tracking}-{os.getpid()}"
    async with connect(make_app('[sandbox]\nmode = "off"\n'), mode=mode) as client:
        await call_ok(client, "exec", {"command": ["true"]})  # a worker, if one is set, serves from here on
        info = await call_ok(client, "workspace_info")
        if info["sandbox"]["process_tracking"]["mechanism"] != tracking:
            pytest.skip(f"{tracking} tracking is not available here")
        out = await call_ok(client, "exec", {"command": f"(exec -a {tag} sleep 100) & echo hi"})
        assert out["output"] == "hi\n" and not out["running"], out
        left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
        assert not [p for p in left if alive(int(p))], f"{tag} outlived its command"


async def test_stderr_has_a_cursor_of_its_own(make_app, mode):
    """Found by testing from outside: with separate_stderr, read_output's after_seq re-read
    stdout but stderr moved on each call, so a re-read lost the stderr a failed call had carried.
    stderr_seq/next_stderr_seq and after_stderr_seq make it re-readable like stdout."""
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "echo o1; echo e1 >&2; sleep 0.6; echo o2; echo e2 >&2; sleep 30",
                                             "separate_stderr": True, "yield_ms": 300})
        assert (out["output"], out["stderr"], out["stderr_seq"], out["next_stderr_seq"]) == ("o1\n", "e1\n", 0, 3)
        session = out["session_id"]
        rest = {"output": "", "stderr": ""}
        while (rest["output"], rest["stderr"]) != ("o2\n", "e2\n"):
            more = await call_ok(client, "read_output", {"session_id": session, "wait_ms": 3000})
            assert more["running"], more
            rest = {"output": rest["output"] + more["output"], "stderr": rest["stderr"] + more["stderr"]}
        again = await call_ok(client, "read_output", {"session_id": session, "after_seq": 0, "after_stderr_seq": 0})
        assert (again["output"], again["stderr"], again["stderr_seq"], again["next_stderr_seq"]) == (
            "o1\no2\n", "e1\ne2\n", 0, 6), again
        tail = await call_ok(client, "read_output", {"session_id": session, "after_seq": 3, "after_stderr_seq": 3})
        assert (tail["output"], tail["stderr"]) == ("o2\n", "e2\n"), tail
        past = await call_error(client, "read_output", {"session_id": session, "after_stderr_seq": 7})
        await call_ok(client, "terminate", {"session_id": session, "grace_ms": 500})
        merged = await call_ok(client, "exec", {"command": "echo a; sleep 0.5", "yield_ms": 100})
        needs_separate = await call_error(client, "read_output", {"session_id": merged["session_id"],
                                                                   "after_stderr_seq": 0})
    assert past["code"] == "invalid_argument" and past["details"]["argument"] == "after_stderr_seq", past
    assert "next_stderr_seq 6" in past["message"], past
    assert needs_separate["code"] == "invalid_argument" and "separate_stderr" in needs_separate["message"]
    assert merged.get("stderr_seq") is None and merged.get("next_stderr_seq") is None


async def test_a_cursor_inside_a_character_starts_at_the_next_one(make_app, mode):
    """Found by testing from outside: an after_seq a client counted itself, landing inside a
    character, answered U+FFFD for the character's last bytes. The read starts after it, and
    seq says where. Bytes that are not UTF-8 are still shown (as U+FFFD), not skipped."""
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "printf '\\342\\202\\254x\\200y'; sleep 30", "yield_ms": 300})
        session = out["session_id"]
        assert (out["output"], out["next_seq"]) == ("€x\ufffdy", 6), out
        inside = [await call_ok(client, "read_output", {"session_id": session, "after_seq": n}) for n in (1, 2)]
        invalid = await call_ok(client, "read_output", {"session_id": session, "after_seq": 4})
        await call_ok(client, "terminate", {"session_id": session, "grace_ms": 500})
    assert [(r["output"], r["seq"], r["next_seq"]) for r in inside] == [("x\ufffdy", 3, 6)] * 2, inside
    assert (invalid["output"], invalid["seq"]) == ("\ufffdy", 4), invalid


async def test_a_wait_for_output_is_not_ended_by_half_a_character(make_app, mode):
    """Found by testing from outside: with only the first byte of a character written,
    read_output's wait_ms returned at once and empty, and a client polling it made 10,000 calls
    in 3 s. Those bytes are not output a read can show: the wait goes on until the character is
    whole."""
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "printf '\\342'; sleep 1.5; printf '\\202\\254done'",
                                             "yield_ms": 300})
        start = time.monotonic()
        rest = await call_ok(client, "read_output", {"session_id": out["session_id"], "wait_ms": 5000})
        waited = time.monotonic() - start
    assert out["output"] == "" and out["running"], out
    assert rest["output"].startswith("€") and waited > 0.8, (rest, waited)


async def test_omitted_bytes_lie_between_seq_and_next_seq_on_each_stream(make_app, mode):
    """Found by testing from outside: a read from the first dropped byte answered seq at the
    tail's start, one from the byte before answered seq at the cursor; and with separate_stderr,
    omitted_bytes added stderr's dropped bytes to stdout's. seq is now where the read started,
    the dropped bytes lie between seq and next_seq, and each stream counts its own."""
    policy = "[limits]\noutput_cap_bytes = 4096\n"
    total = sum(len(f"{i}\n") for i in range(1, 20001))
    async with connect(make_app(policy), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "seq 1 20000; sleep 30", "yield_ms": 1500, "max_bytes": 100})
        session, head = out["session_id"], 2048  # the head is half the cap
        reads = [await call_ok(client, "read_output", {"session_id": session, "after_seq": at, "max_bytes": 30})
                 for at in (head - 1, head, head + 5)]
        await call_ok(client, "terminate", {"session_id": session, "grace_ms": 500})
        separate = await call_ok(client, "exec", {"command": "seq 1 20000 >&2; echo out", "separate_stderr": True,
                                                  "max_bytes": 1_000_000})
    dropped = total - 4096
    for at, read in zip((head - 1, head, head + 5), reads):
        shown = read["output"].replace(f"... {read['omitted_bytes']} bytes omitted ...\n", "")
        assert read["seq"] == at, (at, read)
        assert read["omitted_bytes"] == dropped - max(0, at - head), (at, read)
        assert read["next_seq"] - read["seq"] == len(shown.encode()) + read["omitted_bytes"], (at, read)
    assert (separate["output"], separate["omitted_bytes"]) == ("out\n", 0), separate
    assert separate["stderr_omitted_bytes"] == dropped, separate


async def test_an_exec_answer_holds_its_output_though_another_call_read_it_first(make_app, mode):
    """Found by testing from outside: a terminate (or read_output) sent while exec still waited
    took the output, and exec's answer, and its stored record, said the command ended with
    none, omitted_bytes 0. exec's answer is the command's first: it shows the output from the
    start."""
    async with connect(make_app(), mode=mode) as client:
        answers: dict[str, dict] = {}

        async def run() -> None:
            answers["exec"] = await call_ok(client, "exec", {"command": "echo IMPORTANT; sleep 100", "yield_ms": 20000})

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(10):
                while not (listed := (await call_ok(client, "list_sessions"))["sessions"]) or not listed[0]["unread_bytes"]:
                    await anyio.sleep(0.05)
            answers["terminate"] = await call_ok(client, "terminate", {"session_id": listed[0]["session_id"],
                                                                       "grace_ms": 200})
    assert answers["terminate"]["output"] == "IMPORTANT\n"
    assert answers["exec"]["running"] is False and answers["exec"]["output"] == "IMPORTANT\n", answers["exec"]
    assert answers["exec"]["seq"] == 0


async def test_write_stdin_can_end_the_input_of_a_pipe_session(make_app, mode):
    """Found by testing from outside: on an interactive session without a terminal, '\\x04' is a
    byte like any other, and nothing could end the command's input, so `wc -c` never finished.
    close_stdin ends it once the text is written (a terminal session: plugins/pty's tests)."""
    async with connect(make_app(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "wc -c", "interactive": True, "yield_ms": 100})
        await call_ok(client, "write_stdin", {"session_id": out["session_id"], "chars": "abc", "yield_ms": 100})
        done = await call_ok(client, "write_stdin", {"session_id": out["session_id"], "chars": "de",
                                                     "close_stdin": True, "yield_ms": 5000})
    assert done["running"] is False and done["exit_code"] == 0 and done["output"].strip() == "5", done


async def test_true_is_not_a_number_of_milliseconds(make_app, mode):
    """Found by testing from outside: timeout_ms=true was taken as 1 ms, and the command was
    killed at once (exit code 124). Lax mode reads "30" as 30 and "yes" as true, but a
    boolean is no integer: it is refused, naming the argument."""
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "exec", {"command": "echo hi", "timeout_ms": True})
        text = await call_ok(client, "exec", {"command": "echo hi", "timeout_ms": "5000", "yield_ms": "5000"})
    assert error["code"] == "invalid_arguments" and "timeout_ms" in error["message"], error
    assert text["output"] == "hi\n"

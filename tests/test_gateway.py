"""The gateway through real MCP sessions: refusals per rule kind, bad input, errors,
progress and cancellation."""

from __future__ import annotations

import os
import time

import anyio
import pytest

from codespace.testing import call_error, call_ok, connect

pytestmark = pytest.mark.anyio

POLICY = """
[filesystem.paths]
"secret" = "none"
"docs" = "read"

[commands]
rules = [
  { program = "git", args = ["push", "**"], decision = "deny", reason = "the operator pushes" },
  { program = "rm", decision = "deny" },
]

[limits]
max_argument_bytes = 65536
"""


async def _assert_refused(client, tool, args, rule, *fragments):
    error = await call_error(client, tool, args)
    assert error["code"] == "refused", error
    assert error["rule"] == rule
    assert rule.split("[")[0] in error["message"]
    for fragment in fragments:
        assert fragment in error["message"]
    return error


async def test_path_rule_none_refuses_reads(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        await _assert_refused(client, "read_file", {"path": "secret/key.pem"}, "filesystem.paths['secret']", "'none'")
        await _assert_refused(client, "list_dir", {"path": "secret"}, "filesystem.paths['secret']")


async def test_read_only_entry_refuses_writes(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        await _assert_refused(
            client, "write_file", {"path": "docs/a.md", "content": "x"}, "filesystem.paths['docs']", "read-only"
        )
        await _assert_refused(
            client, "move", {"source": "a", "destination": "docs/a"}, "filesystem.paths['docs']"
        )


async def test_protected_paths_refuse_writes_at_any_depth(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        for path in (".git/config", ".git/hooks/pre-commit", "sub/.git/hooks/x", ".codespace/policy.toml",
                     ".codex/config.toml", ".agents/x", ".bashrc"):
            await _assert_refused(client, "write_file", {"path": path, "content": "x"}, "filesystem.protected")
        await _assert_refused(client, "remove", {"path": ".git", "recursive": True}, "filesystem.protected")


async def test_outside_workspace_is_read_only_and_secrets_hidden(make_app, mode, state):
    async with connect(make_app(POLICY), mode=mode) as client:
        await _assert_refused(client, "write_file", {"path": "/etc/passwd", "content": "x"}, "filesystem.paths['/']")
        await _assert_refused(client, "write_file", {"path": "../escape.txt", "content": "x"}, "filesystem.paths['/']")
        await _assert_refused(client, "read_file", {"path": "/proc/self/environ"}, "filesystem.paths['/proc']")
        await _assert_refused(client, "read_file", {"path": str(state / "operations.sqlite3")}, "CodeSpace state directory")


async def test_symlink_resolution_is_checked(make_app, ws, mode, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, ws / "link")
    os.symlink("/etc", ws / "etc-link")
    async with connect(make_app(POLICY), mode=mode) as client:
        error = await _assert_refused(
            client, "write_file", {"path": "link/x", "content": "x"}, "filesystem.paths['/']", "symbolic link"
        )
        assert str(outside) in error["message"]
        await _assert_refused(client, "write_file", {"path": "etc-link/passwd", "content": "x"}, "filesystem.paths['/']")


async def test_path_syntax_refusals(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        error = await _assert_refused(client, "read_file", {"path": "a\0b"}, "path syntax", "NUL")
        assert "valid path" in error["message"]
        await _assert_refused(client, "read_file", {"path": "x" * 300}, "path syntax", "longer than 255")
        await _assert_refused(client, "read_file", {"path": ""}, "path syntax", "empty")


async def test_command_rules_refuse_by_argv(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        await _assert_refused(
            client, "check_command", {"argv": ["git", "push", "origin", "main"]}, "commands.rules[0]",
            "the operator pushes",
        )
        await _assert_refused(client, "check_command", {"argv": ["/usr/bin/env", "FOO=1", "rm", "-rf", "x"]},
                              "commands.rules[1]")
        await _assert_refused(client, "check_command", {"script": "ls && git push origin main"}, "commands.rules[0]")
        await _assert_refused(client, "check_command", {"script": "bash -lc 'echo hi; rm -r x'"}, "commands.rules[1]")
        ok = await call_ok(client, "check_command", {"argv": ["git", "pushx"]})
        assert ok == {"allowed": True}
        assert await call_ok(client, "check_command", {"script": "echo 'rm -rf /' | cat"}) == {"allowed": True}


async def test_command_default_deny_and_opaque_shell(make_app, mode):
    policy = """
[commands]
default = "deny"
opaque_shell = "deny"
rules = [{ program = "ls", decision = "allow" }, { program = "echo", decision = "allow" }]
"""
    async with connect(make_app(policy), mode=mode) as client:
        assert await call_ok(client, "check_command", {"script": "ls -la | echo"}) == {"allowed": True}
        await _assert_refused(client, "check_command", {"argv": ["cat", "x"]}, "commands.default")
        await _assert_refused(client, "check_command", {"script": "echo $(cat /etc/passwd)"}, "commands.opaque_shell")
        await _assert_refused(client, "check_command", {"script": "eval ls"}, "commands.opaque_shell")


async def test_huge_argument_is_refused_and_server_keeps_serving(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        error = await _assert_refused(
            client, "write_file", {"path": "big.txt", "content": "x" * 200_000}, "limits.max_argument_bytes",
            "200", "split",
        )
        assert "65536" in error["message"]
        info = await call_ok(client, "workspace_info")
        assert info["limits"]["max_argument_bytes"] == 65536


async def test_refusals_are_recorded(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        await call_error(client, "read_file", {"path": "secret/a"})
        await call_error(client, "write_file", {"path": ".git/x", "content": "", "operation_id": "mine"})
        listing = await call_ok(client, "list_operations", {"status": "refused"})
    rules = {(o["tool"], o["rule"]) for o in listing["operations"]}
    assert ("read_file", "filesystem.paths['secret']") in rules
    assert ("write_file", "filesystem.protected") in rules
    assert "mine" in {o["operation_id"] for o in listing["operations"]}


async def test_malformed_input_gets_readable_errors(make_app, mode):
    async with connect(make_app(POLICY), mode=mode) as client:
        missing = await call_error(client, "read_file", {})
        assert missing["code"] == "invalid_arguments" and "'path'" in missing["message"]
        wrong = await call_error(client, "read_file", {"path": "a", "offset": 0, "colour": "red"})
        assert "'offset'" in wrong["message"] and "'colour': unknown argument" in wrong["message"]
        typed = await call_error(client, "tally", {"name": ["not", "a", "string"]})
        assert "'name'" in typed["message"]
        unknown = await call_error(client, "no_such_tool", {})
        assert unknown["code"] == "unknown_tool" and "workspace_info" in unknown["message"]
        # Found by testing from outside: "a.txt/" was normalised to a.txt and written.
        slash = await call_error(client, "write_file", {"path": "notes.txt/", "content": "x"})
        assert slash["code"] == "invalid_arguments", slash
        assert "'path': the path ends with '/', which names a directory, not a file" in slash["message"], slash
        for odd, end in (("notes.txt/.", "'.'"), ("sub/..", "'..'"), (".", "'.'")):
            dotted = await call_error(client, "write_file", {"path": odd, "content": "x"})
            assert f"the path ends with {end}, which names a directory" in dotted["message"], dotted
        assert "Value error" not in slash["message"]
        huge = await call_error(client, "exec", {"command": ["true"], "timeout_ms": 1e300})
        assert "'timeout_ms': the number is far too large" in huge["message"] and "string" not in huge["message"], huge
        assert (await call_ok(client, "tally", {"name": "still-serving"}))["count"] == 1


async def test_missing_backend_names_the_plugin_and_frees_the_key(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "write_file", {"path": "a.txt", "content": "x", "operation_id": "w1"})
        assert error["code"] == "backend_missing"
        assert "codespace-fs" in error["message"]
        patch = await call_error(client, "apply_patch", {"patch": "*** Begin Patch\n*** End Patch", "operation_id": "p1"})
        assert "codespace-patch" in patch["message"]
        listing = await call_ok(client, "list_operations", {})
    assert {"w1", "p1"}.isdisjoint(o["operation_id"] for o in listing["operations"])


async def test_internal_error_is_reported_and_recorded(make_app, mode):
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "boom")
        assert error["code"] == "internal_error"
        assert "example" in error["message"] and "failed on purpose" in error["message"]
        assert (await call_ok(client, "tally", {"name": "after-boom"}))["count"] == 1


async def test_progress_notifications_reach_the_client(make_app, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with connect(make_app(), mode=mode) as client:
        result = await client.call_tool("tally", {"name": "p", "sleep_ms": 200}, progress_callback=on_progress)
    assert not result.is_error
    assert [p for p, _, _ in seen] == [0, 1, 2, 3]
    assert seen[0][1] == 4 and seen[0][2] == "step 0"


async def test_cancellation_stops_the_work(make_app, mode, tmp_path):
    marker = tmp_path / "spin-marker"
    async with connect(make_app(), mode=mode) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "spin", {"marker": str(marker)})
            with anyio.fail_after(5):
                while not marker.exists():
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        deadline = time.monotonic() + 5
        while marker.read_text() != "stopped" and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert marker.read_text() == "stopped"
        # the worker stopped long before its natural end (30 s)
        assert (await call_ok(client, "tally", {"name": "after-cancel"}))["count"] == 1

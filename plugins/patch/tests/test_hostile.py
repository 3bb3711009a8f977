"""Hostile patches: clear refusals and nothing written outside the workspace.

Upstream applies patches anywhere the process can write (absolute paths, ``..``,
links out of the tree); CodeSpace checks every target against the workspace
policy first, through the gateway (MCP) or the same check in the helper.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import patch_of, write

from codespace.testing import call_error, call_ok, connect
from codespace_patch.conformance.helper import helper_argv, helper_env, run_helper
from codespace_patch.conformance.trees import snapshot

pytestmark = pytest.mark.anyio


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret\n")
    return path


def _hostile(ws: Path, outside: Path) -> list[tuple[str, str]]:
    os.symlink(outside / "secret.txt", ws / "link-out")
    os.symlink(outside, ws / "dir-out")
    return [
        ("dotdot add", patch_of("*** Add File: ../outside/evil.txt", "+x")),
        ("dotdot update", patch_of("*** Update File: ../outside/secret.txt", "-secret", "+owned")),
        ("dotdot in the middle", patch_of("*** Add File: sub/../../outside/evil.txt", "+x")),
        ("absolute outside", patch_of(f"*** Add File: {outside}/evil.txt", "+x")),
        ("absolute system file", patch_of("*** Update File: /etc/hostname", "@@", "+x")),
        ("delete outside", patch_of("*** Delete File: ../outside/secret.txt")),
        ("link to an outside file", patch_of("*** Update File: link-out", "-secret", "+owned")),
        ("add through a link", patch_of("*** Add File: link-out", "+owned")),
        ("parent is a link out", patch_of("*** Add File: dir-out/evil.txt", "+x")),
        ("move out", patch_of("*** Update File: inside.txt", "*** Move to: ../outside/moved.txt", "-in", "+out")),
        ("move out through a link", patch_of("*** Update File: inside.txt", "*** Move to: dir-out/moved.txt", "-in", "+x")),
        ("protected .git", patch_of("*** Add File: .git/hooks/pre-commit", "+#!/bin/sh")),
        ("later section escapes", patch_of("*** Add File: fine.txt", "+ok", "*** Add File: ../outside/evil.txt", "+x")),
    ]


async def test_mcp_refuses_and_writes_nothing(make_app, ws, outside, mode):
    write(ws, {"inside.txt": "in\n"})
    cases = _hostile(ws, outside)
    before_out, before_ws = snapshot(outside), snapshot(ws)
    async with connect(make_app(), mode=mode) as client:
        for name, patch in cases:
            for patch_mode in ("atomic", "upstream"):
                error = await call_error(client, "apply_patch", {"patch": patch, "mode": patch_mode})
                assert error["code"] == "refused", (name, error)
                assert error["message"].startswith("refused"), (name, error["message"])
                assert "To proceed" in error["message"], name
    assert snapshot(outside) == before_out
    assert snapshot(ws) == before_ws


def test_helper_refuses_and_writes_nothing(ws, outside, tmp_path, fs_plugin):
    write(ws, {"inside.txt": "in\n"})
    cases = _hostile(ws, outside)
    before_out, before_ws = snapshot(outside), snapshot(ws)
    backend = "real" if fs_plugin == "fs" else "test"
    argv = helper_argv(backend)
    env = helper_env(str(tmp_path / "state"), str(tmp_path), backend)
    for name, patch in cases[:6] + cases[-3:]:
        for patch_mode in ("upstream", "atomic"):
            outcome = run_helper(argv, str(ws), patch, {**env, "CODESPACE_PATCH_MODE": patch_mode})
            assert outcome.code == 1, (name, outcome)
            assert outcome.stdout == b""
            assert outcome.stderr.startswith(b"refused by policy:"), (name, outcome.stderr)
    assert snapshot(outside) == before_out
    assert snapshot(ws) == before_ws


async def test_absolute_paths_inside_the_workspace_are_fine(make_app, ws, mode):
    write(ws, {"a.txt": "a\n"})
    async with connect(make_app(), mode=mode) as client:
        result = await call_ok(client, "apply_patch", {"patch": patch_of(f"*** Update File: {ws}/a.txt", "-a", "+b")})
    assert result["summary"] == f"Success. Updated the following files:\nM {ws}/a.txt\n"
    assert (ws / "a.txt").read_text() == "b\n"


async def test_links_inside_the_workspace_are_followed_like_upstream(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        for patch_mode in ("atomic", "upstream"):
            write(ws, {"target.txt": "a\n"})
            if not (ws / "link").is_symlink():
                os.symlink("target.txt", ws / "link")
            await call_ok(client, "apply_patch", {"mode": patch_mode, "patch": patch_of(
                "*** Update File: link", "-a", "+b", "*** Update File: target.txt", "-b", "+c")})
            assert (ws / "link").is_symlink() and (ws / "target.txt").read_text() == "c\n"


async def test_a_50_mb_patch_is_refused_before_parsing(make_app, ws, mode):
    huge = patch_of("*** Add File: big.txt", *(["+" + "x" * 1023] * (50 * 1024)))
    assert len(huge) > 50 * 1024 * 1024
    async with connect(make_app(), mode=mode) as client:
        error = await call_error(client, "apply_patch", {"patch": huge})
    assert error["code"] == "refused" and "limits.max_argument_bytes" in error["message"]
    assert not (ws / "big.txt").exists()


def test_a_50_mb_patch_on_the_helpers_stdin_is_refused(ws, tmp_path, test_plugins):
    huge = patch_of("*** Add File: big.txt", *(["+" + "x" * 1023] * (50 * 1024))).encode()
    outcome = run_helper(helper_argv("test"), str(ws), None, helper_env(str(tmp_path / "s"), str(tmp_path), "test"),
                         stdin=huge)
    assert outcome.code == 1
    assert b"refused by policy: the patch is" in outcome.stderr and b"limits.max_argument_bytes" in outcome.stderr
    assert not (ws / "big.txt").exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"ab\xffc\n", "invalid utf-8 sequence of 1 bytes from index 2"),
        (b"\xff\xfea\x00b\x00", "invalid utf-8 sequence of 1 bytes from index 0"),  # UTF-16
        (b"ok\xe2\x82", "incomplete utf-8 byte sequence from index 2"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "invalid utf-8 sequence of 1 bytes from index 0"),
    ],
)
async def test_binary_or_non_utf8_targets_are_refused_untouched(make_app, ws, mode, content, reason):
    write(ws, {"bin.dat": content})
    async with connect(make_app(), mode=mode) as client:
        for patch_mode in ("atomic", "upstream"):
            error = await call_error(client, "apply_patch", {"mode": patch_mode, "patch": patch_of(
                "*** Update File: bin.dat", "@@", "+x")})
            assert error["message"].startswith(f"Failed to read file to update {ws}/bin.dat: {reason}")
            assert error["code"] == "patch_not_utf8" and "base64" in error["message"]
    assert (ws / "bin.dat").read_bytes() == content


async def test_nul_and_overlong_paths_are_refused(make_app, ws, mode):
    async with connect(make_app(), mode=mode) as client:
        for path in ("a\x00b.txt", "x" * 300):
            error = await call_error(client, "apply_patch", {"patch": patch_of(f"*** Add File: {path}", "+x")})
            assert error["code"] == "refused" and "path syntax" in error["message"]
    assert list(ws.iterdir()) == []

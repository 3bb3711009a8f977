"""Sandboxed terminals behave like unsandboxed ones (real MCP sessions, the pty plugin):
a controlling terminal, job control, ``tty`` naming the pty, resize; list_sessions names
the user's command, not the helper's argv. TIOCSTI stays refused (seccomp)."""

from __future__ import annotations

import importlib.util
import re

import anyio
import pytest
from codespace_linux_sandbox.backend import interpreter
from conftest import require_engine

from codespace.testing import call_ok, connect

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(importlib.util.find_spec("codespace_pty") is None, reason="needs the pty plugin")]


@pytest.fixture
def app_for(make_app, engine: str):
    def make():
        require_engine(engine)
        return make_app(f'[sandbox]\nengine = "{engine}"\n', plugins=("linux_sandbox", "pty"))

    return make


async def _until(client, session_id: str, pattern: str, seen: str = "", timeout: float = 10.0) -> str:
    """Read the terminal's output until ``pattern`` (a regex) shows up."""
    with anyio.move_on_after(timeout):
        while not re.search(pattern, seen):
            out = await call_ok(client, "write_stdin", {"session_id": session_id, "chars": "", "yield_ms": 300})
            seen += out["output"]
            assert out["running"], seen
        return seen
    raise AssertionError(f"no {pattern!r} in the terminal's output: {seen!r}")


async def _send(client, session_id: str, chars: str) -> str:
    return (await call_ok(client, "write_stdin", {"session_id": session_id, "chars": chars, "yield_ms": 500}))["output"]


async def test_job_control_in_a_sandboxed_terminal(app_for, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        start = await call_ok(client, "exec", {"command": ["/bin/bash", "--norc", "--noprofile", "-i"], "tty": True,
                                               "yield_ms": 1500, "env": {"PS1": "READY> "}})
        sid = start["session_id"]
        assert start["sandboxed"] is True and start["running"], start
        seen = await _until(client, sid, "READY> ", start["output"])
        assert "no job control" not in seen and "cannot set terminal process group" not in seen, seen
        seen = await _until(client, sid, "TTY-DONE\r?\n", await _send(client, sid, "tty; echo TTY-DONE\n"))
        assert re.search(r"[\r\n]/dev/pts/\d+\r?\n", seen), seen
        seen = await _send(client, sid, "sleep 60\n")
        seen = await _until(client, sid, r"Stopped\s+sleep 60", seen + await _send(client, sid, "\x1a"))  # Ctrl-Z
        seen = await _until(client, sid, r"\nsleep 60\r?\n", await _send(client, sid, "jobs -l; fg; echo fg-done $?\n"))
        assert not re.search(r"fg-done \d", seen), seen  # fg waits for the job again...
        # ...until Ctrl-C, which ends it and (as unsandboxed) the rest of that line
        await _until(client, sid, r"\^C\r?\n.*READY> ", seen + await _send(client, sid, "\x03"))
        await call_ok(client, "resize", {"session_id": sid, "rows": 33, "cols": 101})
        await _until(client, sid, r"SIZE=33 101", await _send(client, sid, "echo SIZE=$(stty size)\n"))
        sessions = (await call_ok(client, "list_sessions"))["sessions"]
        assert [s["command"] for s in sessions if s["session_id"] == sid] == [
            ["/bin/bash", "--norc", "--noprofile", "-i"]], sessions
        done = await call_ok(client, "write_stdin", {"session_id": sid, "chars": "exit 3\n", "yield_ms": 5000})
        seen = done["output"]
        with anyio.move_on_after(20):
            while done["running"]:
                done = await call_ok(client, "write_stdin", {"session_id": sid, "chars": "", "yield_ms": 1000})
                seen += done["output"]
        assert done["exit_code"] == 3, (done, seen)


async def test_tiocsti_is_refused_on_a_sandboxed_terminal(app_for, base, engine, mode):
    """Without --new-session the command shares the terminal; typing into its input queue
    must still fail (seccomp), so nothing runs after the command ends."""
    marker = base / "ws" / "injected"
    script = ("import fcntl, termios\n"
              "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('TIOCSTI-ALLOWED')\n"
              "except OSError as e:\n    print('TIOCSTI-ERRNO', e.errno)\n")
    async with connect(app_for(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": [interpreter(), "-I", "-c", script], "tty": True,
                                             "yield_ms": 10000})
        assert "TIOCSTI-ERRNO 1" in out["output"], out
        assert not marker.exists()


async def test_list_sessions_names_the_command_of_a_sandboxed_tty_session(app_for, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        started = await call_ok(client, "exec", {"command": ["sleep", "30"], "tty": True, "yield_ms": 300})
        piped = await call_ok(client, "exec", {"command": "sleep 30", "yield_ms": 300})
        sessions = {s["session_id"]: s["command"] for s in (await call_ok(client, "list_sessions"))["sessions"]}
        assert sessions[started["session_id"]] == ["sleep", "30"], sessions
        assert "__main__.py" not in str(sessions) and "codespace_linux_sandbox" not in str(sessions), sessions
        for sid in (started["session_id"], piped["session_id"]):
            await call_ok(client, "terminate", {"session_id": sid, "signal": "KILL"})

"""Exit codes and signals propagate, signals are forwarded once, and no process survives the helper."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from conftest import live_pids_in

from codespace.processes.kill import kill_session


def _status(returncode: int) -> int:
    """What the registry reports: the code, or 128+N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def test_exit_code_propagates(sandbox_env):
    code, _, _ = sandbox_env.run(["/bin/sh", "-c", "exit 7"])
    assert code == 7


def test_self_terminating_signal_gives_143(sandbox_env):
    code, _, _ = sandbox_env.run(["/bin/sh", "-c", "kill -TERM $$"])
    assert _status(code) == 143


def _wait_for(proc: subprocess.Popen, text: bytes, timeout: float = 20) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    os.set_blocking(proc.stdout.fileno(), False)
    while text not in seen:
        assert time.monotonic() < deadline, f"never saw {text!r}: {seen!r}"
        chunk = proc.stdout.read()
        if chunk:
            seen += chunk
        else:
            time.sleep(0.01)
    return seen


def test_host_terminate_reaches_the_command(sandbox_env):
    """The host signals the helper's group and session (kill_session). Under bubblewrap the
    command is in its own session and gets exactly the one TERM the helper forwards; under
    Landlock it stays in the helper's session and gets what an unsandboxed command gets
    (kill_session signals the group and then each session member, so possibly twice)."""
    script = 'n=0; trap \'n=$((n+1)); echo "got TERM $n"; sleep 0.3; exit 3\' TERM; echo ready; while :; do sleep 0.05; done'
    proc = sandbox_env.popen(["/bin/sh", "-c", script])
    _wait_for(proc, b"ready")
    kill_session(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert b"got TERM 1" in out
    if sandbox_env.sandbox.preference == "bubblewrap":
        assert b"got TERM 2" not in out
    assert proc.returncode == 3


def test_forwarded_signal_is_reraised(sandbox_env):
    proc = sandbox_env.popen(["/bin/sh", "-c", "echo ready; exec sleep 30"])
    _wait_for(proc, b"ready")
    time.sleep(0.1)  # let the exec happen
    kill_session(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGTERM  # the host sees the command killed by TERM


def test_interrupt_reaches_the_command(sandbox_env):
    script = "trap 'echo interrupted; exit 130' INT; echo ready; while :; do sleep 0.05; done"
    proc = sandbox_env.popen(["/bin/sh", "-c", script])
    _wait_for(proc, b"ready")
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the foreground group
    out, _ = proc.communicate(timeout=20)
    assert b"interrupted" in out and _status(proc.returncode) == 130


def test_background_processes_do_not_survive_the_helper(sandbox_env):
    marker = "317.31"
    code, out, _ = sandbox_env.run(
        ["/bin/sh", "-c", f"sleep {marker} & (setsid sleep {marker} &) ; nohup sleep {marker} >/dev/null 2>&1 & echo started"])
    assert code == 0 and "started" in out
    deadline = time.monotonic() + 5
    while live_pids_in([f"sleep {marker}"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_in([f"sleep {marker}"]) == []


def test_nothing_survives_a_killed_helper(sandbox_env):
    marker = "318.41"
    proc = sandbox_env.popen(["/bin/sh", "-c", f"sleep {marker} & sleep {marker} & echo ready; wait"])
    _wait_for(proc, b"ready")
    kill_session(proc.pid, signal.SIGKILL)  # what the registry does after the grace period
    proc.communicate(timeout=20)
    deadline = time.monotonic() + 5
    while live_pids_in([f"sleep {marker}"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_in([f"sleep {marker}"]) == []


def test_stdin_and_stdout_pass_through(sandbox_env):
    proc = sandbox_env.popen(["/bin/cat"], stdin=subprocess.PIPE)
    out, _ = proc.communicate(b"hello through the sandbox\n", timeout=20)
    assert out == b"hello through the sandbox\n" and proc.returncode == 0

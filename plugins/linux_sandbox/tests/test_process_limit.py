"""[sandbox] max_processes: a fork bomb ends the command, not the host (bubblewrap engine).

The limit is RLIMIT_NPROC set on the sandbox's PID 1 inside the command's own user namespace,
where the kernel counts only that command's processes; the Landlock engine has no such
namespace and says so in cannot_enforce."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from codespace_linux_sandbox.backend import interpreter
from conftest import live_pids_in, make_env, require_engine

from codespace.processes.kill import kill_session

# Forks until refused (or 200), each child sleeping long enough to be counted; prints how many.
FORKS = """
import os, time
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as exc:
        print("refused", exc.errno)
        break
    if pid == 0:
        time.sleep(1.5)
        os._exit(0)
    n += 1
print("forked", n)
"""


def _forked(out: str) -> int:
    return int(out.split("forked ", 1)[1].split()[0])


@pytest.mark.parametrize("start", ["wrap", "launch"])
def test_a_command_cannot_fork_past_max_processes(tmp_path, start):
    require_engine("bubblewrap")
    env = make_env(tmp_path, "bubblewrap", start=start)
    env.sandbox.max_processes = 40
    code, out, err = env.run([interpreter(), "-I", "-S", "-c", FORKS])
    assert code == 0, err
    assert "refused 11" in out, out  # EAGAIN
    assert 30 <= _forked(out) < 40, out  # the sandbox's init and the interpreter count too


def test_other_processes_of_the_same_uid_do_not_count(tmp_path):
    """Sixty processes of the command's host uid outside the sandbox leave a limit of 40 whole:
    the count is the command's own user namespace's, not the uid's on the host."""
    require_engine("bubblewrap")
    env = make_env(tmp_path, "bubblewrap")
    env.sandbox.max_processes = 40
    ids = env.sandbox.run_as()
    marker = "97.31"
    def drop() -> None:
        if ids is not None:
            os.setgid(ids.gid)
            os.setuid(ids.uid)
    sleepers = [subprocess.Popen(["sleep", marker], preexec_fn=drop) for _ in range(60)]
    try:
        code, out, err = env.run([interpreter(), "-I", "-S", "-c", FORKS])
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert 30 <= _forked(out) < 40, out


def test_no_limit_when_max_processes_is_zero(tmp_path):
    require_engine("bubblewrap")
    env = make_env(tmp_path, "bubblewrap")
    env.sandbox.max_processes = 0
    code, out, err = env.run([interpreter(), "-I", "-S", "-c", FORKS])
    assert code == 0, err
    assert _forked(out) == 200, out


def test_a_fork_bomb_is_held_to_max_processes_and_ends_with_its_command(tmp_path):
    """The classic shell fork bomb: after two seconds the sandbox holds at most max_processes
    processes (counted in its own /proc, by shell builtins that need no fork), and nothing of it
    is left once the command has ended."""
    require_engine("bubblewrap")
    env = make_env(tmp_path, "bubblewrap")
    env.sandbox.max_processes = 64
    script = ("b() { b | b & }; b; end=$((SECONDS + 2)); while [ $SECONDS -lt $end ]; do :; done; "
              "n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo count $n; kill -9 -1")
    proc = env.popen(["/bin/bash", "-c", script])
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        kill_session(proc.pid, signal.SIGKILL)  # without the limit the bomb outlives the timeout
        proc.communicate()
    out = out.decode()
    count = int(out.split("count ", 1)[1].split()[0])
    assert 1 < count <= 64 + 1, out  # and the sandbox's init, which the limit does not hold
    deadline = time.monotonic() + 5
    while live_pids_in(["b | b"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_in(["b | b"]) == []


def test_landlock_says_it_cannot_limit_processes(tmp_path):
    from codespace_linux_sandbox.limits import cannot_enforce

    assert any("max_processes (4096)" in line for line in cannot_enforce("landlock", 6, max_processes=4096))
    assert not any("max_processes" in line for line in cannot_enforce("landlock", 6, max_processes=0))
    assert not any("max_processes" in line for line in cannot_enforce("bubblewrap", 6, max_processes=4096))

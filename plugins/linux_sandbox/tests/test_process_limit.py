"""[sandbox] max_processes: a fork bomb ends the command, not the host.

The limit is RLIMIT_NPROC inside the command's own user namespace, where the kernel counts only
that command's processes: set on the sandbox's PID 1 (bubblewrap), or by the command's child
after it entered a user namespace of its own (Landlock). Where the server cannot make user
namespaces, the Landlock engine says so in cannot_enforce."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
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


ENGINES = [("bubblewrap", "wrap"), ("bubblewrap", "launch"), ("landlock", "wrap"), ("landlock", "launch")]


@pytest.mark.parametrize(("engine", "start"), ENGINES, ids=[f"{e}-{s}" for e, s in ENGINES])
def test_a_command_cannot_fork_past_max_processes(tmp_path, engine, start):
    require_engine(engine)
    env = make_env(tmp_path, engine, start=start)
    env.sandbox.max_processes = 40
    code, out, err = env.run([interpreter(), "-I", "-S", "-c", FORKS])
    assert code == 0, err
    assert "refused 11" in out, out  # EAGAIN
    assert 30 <= _forked(out) < 40, out  # the sandbox's init and the interpreter count too


@pytest.mark.parametrize("engine", ["bubblewrap", "landlock"])
def test_other_processes_of_the_same_uid_do_not_count(tmp_path, engine):
    """Sixty processes of the command's host uid outside the sandbox leave a limit of 40 whole:
    the count is the command's own user namespace's, not the uid's on the host."""
    require_engine(engine)
    env = make_env(tmp_path, engine)
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


@pytest.mark.parametrize("engine", ["bubblewrap", "landlock"])
def test_no_limit_when_max_processes_is_zero(tmp_path, engine):
    require_engine(engine)
    env = make_env(tmp_path, engine)
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


def test_a_landlock_commands_own_user_namespace_keeps_its_ids_and_files(tmp_path):
    """The Landlock command's own user namespace keeps the ids it runs as and owns files with.
    A root server's maps every id to itself, so nothing it sees changes; a server that is not
    root can map only its own ids (as bubblewrap's namespace does), so files of other ids, such
    as root's, show as the overflow id, 65534 (max_processes = 0 keeps the host's view)."""
    require_engine("landlock")
    script = "import os; print(os.getuid(), os.getgid(), os.stat('.').st_uid, os.stat('/').st_uid)"
    seen = []
    for limit in (0, 40):
        (tmp_path / str(limit)).mkdir()
        env = make_env(tmp_path / str(limit), "landlock")
        env.sandbox.max_processes = limit
        code, out, err = env.run([interpreter(), "-I", "-S", "-c", script])
        assert code == 0, err
        seen.append(out.split())
    without, within = seen
    assert within[:3] == without[:3], seen
    if os.geteuid() == 0:
        assert within == without, seen
        code, out, err = env.run(["/bin/cat", "/proc/self/uid_map"])
        assert out.split() == ["0", "0", "4294967295"], out
    else:
        assert (without[3], within[3]) == ("0", "65534"), seen


INFO = """
import sys
from codespace.testing import open_workspace
from codespace_linux_sandbox.backend import LinuxSandbox
from codespace_linux_sandbox.engine_choice import may_make_user_namespaces
ws = open_workspace(sys.argv[1], state_dir=sys.argv[2], policy='[sandbox]\\nengine = "landlock"\\nmax_processes = 40\\n')
named = [line for line in LinuxSandbox.for_workspace(ws).info().cannot_enforce if "max_processes (40)" in line]
print(may_make_user_namespaces(), len(named))
"""


def test_a_server_that_cannot_make_user_namespaces_is_told_the_landlock_limit_is_not_enforced(tmp_path):
    """The server's probe tries what the command's child will do. In a user namespace whose
    user.max_user_namespaces is 0 (a server that AppArmor's restriction or the sysctl keep from
    making them) it fails, and the Landlock engine names the limit in cannot_enforce; here it
    works and the limit is not named."""
    require_engine("landlock")
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    (tmp_path / "ws").mkdir()
    argv = [sys.executable, "-I", "-c", INFO, str(tmp_path / "ws")]
    here = subprocess.run([*argv, str(tmp_path / "s1")], capture_output=True, text=True, timeout=60)
    assert here.stdout.split() == ["True", "0"], here.stdout + here.stderr
    kept_from_them = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
         "sh", *argv, str(tmp_path / "s2")], capture_output=True, text=True, timeout=60)
    assert kept_from_them.stdout.split() == ["False", "1"], kept_from_them.stdout + kept_from_them.stderr


def test_landlock_names_the_limit_only_where_it_cannot_enforce_it(tmp_path):
    from codespace_linux_sandbox.limits import cannot_enforce

    named = lambda lines: [line for line in lines if "max_processes (4096)" in line]  # noqa: E731
    assert named(cannot_enforce("landlock", 6, max_processes=4096, user_namespaces=False))
    assert not named(cannot_enforce("landlock", 6, max_processes=4096))
    assert not any("max_processes" in line for line in cannot_enforce("landlock", 6, max_processes=0,
                                                                      user_namespaces=False))
    assert not named(cannot_enforce("bubblewrap", 6, max_processes=4096, user_namespaces=False))

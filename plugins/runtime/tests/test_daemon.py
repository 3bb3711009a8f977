"""Daemon mode through the real command: codespace-worker start|status|stop on a workspace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from codespace_runtime import protocol as p

from .conftest import worker_argv
from .test_hardening import gone


@pytest.fixture
def workspace(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    env = {**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state")}
    yield root, env, tmp_path / "state" / "worker"
    subprocess.run(worker_argv("stop", "--workspace", str(root)), env=env, capture_output=True, timeout=60)
    # A test that spoiled the token (or the stop) must not leave its daemon running after the run.
    left = subprocess.run(worker_argv("status", "--workspace", str(root), "--json"), env=env, capture_output=True,
                          text=True, timeout=60)
    pid = json.loads(left.stdout or "{}").get("pid") if left.returncode == 0 else None
    if pid:
        os.kill(pid, signal.SIGKILL)


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(worker_argv(*args), env=env, capture_output=True, text=True, timeout=60)


def start(root: Path, env: dict) -> subprocess.CompletedProcess:
    return cli(env, "start", "--workspace", str(root), "--no-runner")


def status(root: Path, env: dict) -> tuple[int, dict]:
    done = cli(env, "status", "--workspace", str(root), "--json")
    return done.returncode, json.loads(done.stdout)


def test_start_status_stop(workspace):
    root, env, directory = workspace
    started = start(root, env)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split("pid ")[1].split(",")[0])
    assert (directory / "worker.sock").is_socket() and int((directory / "worker.pid").read_text()) == pid
    assert (directory / "token").stat().st_mode & 0o777 == 0o600
    code, report = status(root, env)
    assert code == 0 and report["running"] and report["pid"] == pid
    assert report["protocols"] == [p.PROTOCOL] and report["worker"] == p.WORKER_VERSION
    assert "running: pid" in cli(env, "status", "--workspace", str(root)).stdout
    stopped = cli(env, "stop", "--workspace", str(root))
    assert stopped.returncode == 0 and f"stopped the worker (pid {pid})" in stopped.stdout
    assert gone(pid, 10)
    assert not (directory / "worker.sock").exists() and not (directory / "worker.pid").exists()
    code, report = status(root, env)
    assert code == 3 and not report["running"]


def test_a_second_start_is_refused_while_one_serves(workspace):
    root, env, _ = workspace
    assert start(root, env).returncode == 0
    again = start(root, env)
    assert again.returncode == 1 and "already serving" in again.stderr


def test_a_killed_daemons_socket_is_stale_and_the_next_start_replaces_it(workspace):
    root, env, directory = workspace
    first = start(root, env)
    pid = int(first.stdout.split("pid ")[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)
    assert gone(pid, 10)
    assert (directory / "worker.sock").is_socket()  # left behind
    code, report = status(root, env)
    assert code == 3 and "refused" in report["problem"].lower()
    second = start(root, env)
    assert second.returncode == 0, second.stderr
    assert status(root, env)[0] == 0


def test_stop_after_a_kill_cleans_the_stale_socket(workspace):
    root, env, directory = workspace
    pid = int(start(root, env).stdout.split("pid ")[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)
    assert gone(pid, 10)
    done = cli(env, "stop", "--workspace", str(root))
    assert done.returncode == 0 and "no worker was serving" in done.stdout
    assert not os.path.lexists(directory / "worker.sock")


def test_something_that_is_not_a_socket_at_the_path_stops_the_start_and_stays(workspace):
    root, env, directory = workspace
    directory.parent.mkdir(mode=0o700)
    directory.mkdir(mode=0o700)
    (directory / "worker.sock").write_text("not a socket")
    done = start(root, env)
    assert done.returncode != 0 and "is not a socket; it is left alone" in done.stderr
    assert (directory / "worker.sock").read_text() == "not a socket"


def test_stop_authenticates_with_the_token(workspace):
    root, env, directory = workspace
    assert start(root, env).returncode == 0
    (directory / "token").write_text("f" * 64 + "\n")  # not the token the worker loaded
    done = cli(env, "stop", "--workspace", str(root))
    assert done.returncode == 1 and "proof does not match" in done.stderr
    assert status(root, env)[0] == 0


def test_a_socket_directory_others_may_enter_is_refused(workspace):
    root, env, directory = workspace
    directory.parent.mkdir(mode=0o700)
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    done = start(root, env)
    assert done.returncode == 2 and "mode is 0755" in done.stderr


def test_status_of_a_workspace_that_never_had_a_worker(workspace):
    root, env, _ = workspace
    code, report = status(root, env)
    assert code == 3 and report == {"running": False, "pid": None, "socket": report["socket"],
                                    "workspace": str(root.resolve()), "problem": report["problem"]}
    assert "No such file" in report["problem"]


def test_serve_refuses_an_fd_that_is_not_a_socket(tmp_path):
    (tmp_path / "ws").mkdir()
    from .conftest import make_token
    make_token(tmp_path / "token")
    r, w = os.pipe()
    done = subprocess.run(worker_argv("serve", "--workspace", str(tmp_path / "ws"), "--token-file",
                                      str(tmp_path / "token"), "--no-runner", "--fd", str(r)),
                          pass_fds=[r], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state")})
    os.close(r)
    os.close(w)
    assert done.returncode == 2 and f"--fd {r} is not" in done.stderr


def test_serve_without_a_channel_is_a_usage_error(tmp_path):
    done = subprocess.run(worker_argv("serve", "--workspace", str(tmp_path), "--token-file", "x"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--fd" in done.stderr and "--socket" in done.stderr



def test_start_in_the_foreground_becomes_the_worker(workspace):
    root, env, directory = workspace
    proc = subprocess.Popen(worker_argv("start", "--foreground", "--workspace", str(root), "--no-runner"), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        from .conftest import wait_for_socket
        wait_for_socket(directory / "worker.sock", proc)
        code, report = status(root, env)
        assert code == 0 and report["pid"] == proc.pid  # the process a service manager started is the worker
        assert cli(env, "stop", "--workspace", str(root)).returncode == 0
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()

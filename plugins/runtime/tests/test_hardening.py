"""The running worker's hardening, read from outside through /proc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import UNPRIVILEGED_UID, as_uid, make_token, start_worker, stop_worker, wait_for_socket, worker_argv

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="a second uid needs root and setpriv")


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def gone(pid: int, timeout: float) -> bool:
    """The process has exited (a zombie waiting for a reaper counts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def hardened(tmp_path: Path):
    """A worker started the careless way: LD_* set, an extra descriptor inherited, umask 022,
    cwd somewhere in the workspace."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    previous = os.umask(0o022)
    try:
        running = start_worker(tmp_path, env={"LD_LIBRARY_PATH": "/nonexistent", "LD_CODESPACE_TEST": "1"},
                               pass_fds=[write_end], cwd=tmp_path)
    finally:
        os.umask(previous)
        os.close(write_end)
    yield running, read_end
    os.close(read_end)
    stop_worker(running)


def test_umask_is_077(hardened):
    assert proc_status(hardened[0].proc.pid)["Umask"] == "0077"


def test_no_core_files(hardened):
    limits = Path(f"/proc/{hardened[0].proc.pid}/limits").read_text()
    line = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
    assert line.split()[4:6] == ["0", "0"]


def _readable_by_us(read) -> bool:
    """Whether this process may read the hardened worker's /proc entries: root may; our uid
    may not (the worker is non-dumpable, the point of the hardening), which is checked here."""
    if os.geteuid() == 0:
        return True
    with pytest.raises(PermissionError):
        read()
    return False


def test_no_ld_variables_even_in_the_start_up_environment(hardened):
    if not _readable_by_us(lambda: Path(f"/proc/{hardened[0].proc.pid}/environ").read_bytes()):
        return
    environ = Path(f"/proc/{hardened[0].proc.pid}/environ").read_bytes().split(b"\0")
    assert not [v for v in environ if v.startswith(b"LD_")]
    assert any(v.startswith(b"CODESPACE_STATE_DIR=") for v in environ)  # the rest is kept


def test_cwd_is_root(hardened):
    if not _readable_by_us(lambda: os.readlink(f"/proc/{hardened[0].proc.pid}/cwd")):
        return
    assert os.readlink(f"/proc/{hardened[0].proc.pid}/cwd") == "/"


def test_only_the_listener_and_the_lock_are_open_and_stdin_is_dev_null(hardened):
    running, read_end = hardened
    pid = running.proc.pid
    if not _readable_by_us(lambda: os.listdir(f"/proc/{pid}/fd")):
        return
    for _ in range(100):  # the start-up probe's connection may not be closed on the worker's side yet
        targets = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        if sum(t.startswith("socket:") for t in targets.values()) <= 3:
            break
        time.sleep(0.02)
    assert targets[0] == "/dev/null" and targets[1] == "/dev/null"
    others = {fd: t for fd, t in targets.items() if fd > 2}
    assert str(running.socket.parent / "worker.pid") in others.values()
    pipes = [t for t in others.values() if t.startswith("pipe:")]
    assert pipes == []  # the inherited write end was closed: our read end sees EOF
    assert os.read(read_end, 1) == b""
    # What is left: the pid-file lock, the listener and the event loop's own (epoll, its wake-up pair).
    kinds = sorted("socket" if t.startswith("socket:") else t for t in others.values())
    assert kinds == sorted([str(running.socket.parent / "worker.pid"), "anon_inode:[eventpoll]",
                            "socket", "socket", "socket"])


@needs_root
def test_as_another_uid_its_memory_is_closed_and_ld_is_gone_even_if_the_interpreter_path_is_not_searchable():
    """Started as uid 1000 with LD_* set: the worker starts itself again without them (through
    /proc/self/exe, since the interpreter's path may pass a directory only root may search, as
    a version manager's under /root does), and a same-uid process cannot read its memory."""
    base = Path(tempfile.mkdtemp(prefix="cs-dump-"))
    try:
        for sub in ("ws", "sock"):
            (base / sub).mkdir(mode=0o700)
        make_token(base / "token")
        for path in (base, base / "ws", base / "sock", base / "token"):
            os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        argv = as_uid(UNPRIVILEGED_UID, worker_argv("serve", "--workspace", str(base / "ws"), "--socket",
                                                    str(base / "sock" / "worker.sock"), "--token-file",
                                                    str(base / "token"), "--no-runner"))
        worker = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env={**os.environ, "CODESPACE_STATE_DIR": str(base / "state"),
                                       "LD_CODESPACE_TEST": "1"})
        control = subprocess.Popen(as_uid(UNPRIVILEGED_UID, ["sleep", "30"]))
        try:
            wait_for_socket(base / "sock" / "worker.sock", worker)
            assert proc_status(worker.pid)["Uid"].split()[0] == str(UNPRIVILEGED_UID)
            assert not [v for v in Path(f"/proc/{worker.pid}/environ").read_bytes().split(b"\0") if v.startswith(b"LD_")]
            # A non-dumpable process's /proc entries belong to root; an ordinary one's to its uid.
            assert os.stat(f"/proc/{worker.pid}/fd").st_uid == 0
            assert os.stat(f"/proc/{control.pid}/fd").st_uid == UNPRIVILEGED_UID
            probe = subprocess.run(as_uid(UNPRIVILEGED_UID, [sys.executable, "-I", "-c",
                                   f"open('/proc/{worker.pid}/mem', 'rb')"]), capture_output=True, text=True)
            assert probe.returncode != 0 and "PermissionError" in probe.stderr
            listing = subprocess.run(as_uid(UNPRIVILEGED_UID, ["ls", f"/proc/{worker.pid}/fd"]),
                                     capture_output=True, text=True)
            assert listing.returncode != 0 and "Permission denied" in listing.stderr
        finally:
            for proc in (worker, control):
                proc.terminate()
                proc.wait(10)
            worker.stderr.close()
    finally:
        shutil.rmtree(base)


PARENT = """
import os, socket, subprocess, sys, time
ours, theirs = socket.socketpair()
worker = subprocess.Popen(sys.argv[1:] + ["--fd", str(theirs.fileno())], pass_fds=[theirs.fileno()])
theirs.close()
print(worker.pid, flush=True)
ours.recv(4)  # the greeting has begun: the worker is up and hardened
print("up", flush=True)
time.sleep(60)
"""


def _child_mode_parent(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    (tmp_path / "ws").mkdir()
    make_token(tmp_path / "token")
    argv = worker_argv("serve", "--workspace", str(tmp_path / "ws"), "--token-file", str(tmp_path / "token"),
                       "--no-runner")
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *argv], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state")})
    pid = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "up"
    return parent, pid


def test_child_mode_dies_with_its_parent(tmp_path):
    parent, pid = _child_mode_parent(tmp_path)
    assert not gone(pid, 0.3)
    assert proc_status(pid)["PPid"] == str(parent.pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert gone(pid, 10), "the worker outlived its parent"


def test_child_mode_ends_when_the_server_closes_its_end(tmp_path):
    ours, theirs = __import__("socket").socketpair()
    (tmp_path / "ws").mkdir()
    make_token(tmp_path / "token")
    worker = subprocess.Popen(worker_argv("serve", "--workspace", str(tmp_path / "ws"), "--token-file",
                                          str(tmp_path / "token"), "--no-runner", "--fd", str(theirs.fileno())),
                              pass_fds=[theirs.fileno()], env={**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state")})
    theirs.close()
    assert len(ours.recv(4)) == 4
    ours.close()
    assert worker.wait(10) == 0

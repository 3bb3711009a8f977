"""Socket placement and the peer check, with real sockets, real processes and a real second uid."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from codespace_runtime import sockets

from .conftest import UNPRIVILEGED_UID, as_uid, start_worker, stop_worker

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="a second uid needs root and setpriv")


def test_the_socket_directory_is_created_0700(tmp_path):
    os.umask(0o022)
    directory = sockets.socket_dir(tmp_path)
    assert directory == tmp_path / "worker"
    assert stat.S_IMODE(directory.lstat().st_mode) == 0o700


def test_a_directory_replaced_by_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "worker").symlink_to(elsewhere)
    with pytest.raises(sockets.PlacementError, match="not a directory"):
        sockets.socket_dir(tmp_path)
    with pytest.raises(sockets.PlacementError, match="not a directory"):
        sockets.bind_listener(tmp_path / "worker")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("mode", [0o755, 0o701, 0o770])
def test_a_directory_others_may_enter_is_refused(tmp_path, mode):
    (tmp_path / "worker").mkdir()
    os.chmod(tmp_path / "worker", mode)
    with pytest.raises(sockets.PlacementError, match=f"mode is {mode:04o}"):
        sockets.socket_dir(tmp_path)


@needs_root
def test_a_directory_of_another_uid_is_refused(tmp_path):
    (tmp_path / "worker").mkdir(mode=0o700)
    os.chown(tmp_path / "worker", UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    with pytest.raises(sockets.PlacementError, match=f"belongs to uid {UNPRIVILEGED_UID}"):
        sockets.socket_dir(tmp_path)


def test_the_socket_is_bound_under_umask_077(tmp_path):
    previous = os.umask(0)
    try:
        listener, identity = sockets.bind_listener(sockets.socket_dir(tmp_path))
    finally:
        os.umask(previous)
    info = (tmp_path / "worker" / "worker.sock").lstat()
    assert stat.S_ISSOCK(info.st_mode) and info.st_ino == identity[1]
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0
    listener.close()


def test_a_path_longer_than_sun_path_is_bound_and_reached_through_the_directory(tmp_path):
    deep = tmp_path
    while len(os.fsencode(deep / "worker" / "worker.sock")) <= 140:
        deep = deep / ("d" * 30)
    deep.mkdir(parents=True)
    directory = sockets.socket_dir(deep)
    with pytest.raises(OSError):  # the plain path does not fit: the reason for the detour
        socket.socket(socket.AF_UNIX).bind(str(directory / "spare.sock"))
    listener, _ = sockets.bind_listener(directory)
    assert (directory / "worker.sock").is_socket()
    client = sockets.connect(directory / "worker.sock")
    accepted, _ = listener.accept()
    assert sockets.peer_credentials(accepted)[0] == os.getpid()
    for s in (client, accepted, listener):
        s.close()


def test_a_stale_socket_is_replaced(tmp_path):
    directory = sockets.socket_dir(tmp_path)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(directory / "worker.sock"))
    dead.close()  # the file stays, nobody listens: what a killed worker leaves
    listener, _ = sockets.bind_listener(directory)
    client = sockets.connect(directory / "worker.sock")  # the new socket answers: the stale one went
    accepted, _ = listener.accept()
    for s in (client, accepted, listener):
        s.close()


def test_a_live_socket_makes_the_start_fail(tmp_path):
    directory = sockets.socket_dir(tmp_path)
    live, _ = sockets.bind_listener(directory)
    with pytest.raises(sockets.AlreadyServing, match="a worker is already serving"):
        sockets.bind_listener(directory)
    assert (directory / "worker.sock").is_socket()
    live.close()


@pytest.mark.parametrize("kind", ["file", "directory", "link", "fifo"])
def test_what_is_not_a_socket_is_never_unlinked(tmp_path, kind):
    directory = sockets.socket_dir(tmp_path)
    path = directory / "worker.sock"
    if kind == "file":
        path.write_text("precious")
    elif kind == "directory":
        path.mkdir()
    elif kind == "link":
        path.symlink_to(tmp_path / "nowhere")
    else:
        os.mkfifo(path)
    with pytest.raises(sockets.PlacementError, match="is not a socket; it is left alone"):
        sockets.bind_listener(directory)
    assert os.path.lexists(path)
    if kind == "file":
        assert path.read_text() == "precious"


def test_unlink_if_ours_leaves_a_successors_socket(tmp_path):
    directory = sockets.socket_dir(tmp_path)
    first, first_identity = sockets.bind_listener(directory)
    first.close()
    second, second_identity = sockets.bind_listener(directory)  # the first's socket was stale: replaced
    assert not sockets.unlink_if_ours(directory, first_identity)
    assert (directory / "worker.sock").is_socket()
    assert sockets.unlink_if_ours(directory, second_identity)
    assert not os.path.lexists(directory / "worker.sock")
    second.close()


CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(10)
try:
    s.sendall(b"\\x00\\x00\\x00\\x02{}")
except OSError:
    pass
try:
    data = s.recv(65536)
except ConnectionResetError:
    data = b""
print(len(data))
"""


def _open_fences(directory: Path) -> None:
    """Let uid 1000 reach the socket, so that only the peer check stands in its way."""
    os.chmod(directory.parent, 0o711)
    os.chmod(directory, 0o711)
    os.chmod(directory / "worker.sock", 0o777)


def _connect_as(uid: int, path: Path) -> int:
    done = subprocess.run(as_uid(uid, [sys.executable, "-I", "-c", CLIENT, str(path)]), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.fixture
def open_dir():
    base = Path(tempfile.mkdtemp(prefix="cs-peer-"))  # under /tmp: uid 1000 cannot pass pytest's tmp root
    yield base
    shutil.rmtree(base)


@needs_root
def test_a_uid_not_allowed_is_closed_before_a_byte_is_written(open_dir):
    running = start_worker(open_dir, socket_dir=open_dir / "sock")
    try:
        _open_fences(open_dir / "sock")
        assert _connect_as(UNPRIVILEGED_UID, running.socket) == 0  # no greeting, nothing at all
        assert _connect_as(0, running.socket) > 0  # the worker's own uid is greeted
        assert running.proc.poll() is None
        running.proc.terminate()
        log = running.stderr()
        assert "refused a connection from pid" in log and f"uid {UNPRIVILEGED_UID}" in log
    finally:
        stop_worker(running)


@needs_root
def test_an_allowed_second_uid_is_greeted(open_dir):
    running = start_worker(open_dir, "--allow-uid", str(UNPRIVILEGED_UID), socket_dir=open_dir / "sock")
    try:
        _open_fences(open_dir / "sock")
        assert _connect_as(UNPRIVILEGED_UID, running.socket) > 0
        assert _connect_as(0, running.socket) == 0  # the list replaces the default, it does not add to it
    finally:
        stop_worker(running)

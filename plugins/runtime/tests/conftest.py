"""Real workers for the tests: ``codespace-worker serve`` processes on real sockets."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from codespace_runtime import sockets
from codespace_runtime.client import WorkerCallError, WorkerClient

UNPRIVILEGED_UID = 1000


@dataclass
class Worker:
    proc: subprocess.Popen
    socket: Path
    token: bytes
    token_file: Path
    workspace: Path

    def connect(self) -> socket.socket:
        return sockets.connect(self.socket)

    def stderr(self) -> str:
        self.proc.wait(10)
        return self.proc.stderr.read().decode(errors="replace")


def worker_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "codespace_runtime.cli", *args]


def make_token(path: Path) -> bytes:
    token = secrets.token_hex(32).encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, token + b"\n")
    os.close(fd)
    return token


def wait_for_socket(path: Path, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"worker exited {proc.returncode}: {proc.stderr.read().decode(errors='replace')}")
        try:
            sockets.connect(path).close()
            return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"no worker answered at {path}")


def start_worker(tmp_path: Path, *extra: str, socket_dir: Path | None = None, env: dict | None = None,
                 **popen) -> Worker:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    directory = socket_dir or tmp_path / "sock"
    directory.mkdir(mode=0o700, exist_ok=True)
    token_file = tmp_path / "token"
    token = make_token(token_file) if not token_file.exists() else token_file.read_bytes().strip()
    path = directory / "worker.sock"
    full_env = {**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state"), **(env or {})}
    proc = subprocess.Popen(worker_argv("serve", "--workspace", str(workspace), "--socket", str(path),
                                        "--token-file", str(token_file), "--no-runner", *extra),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=full_env, **popen)
    wait_for_socket(path, proc)
    return Worker(proc, path, token, token_file, workspace)


def stop_worker(worker: Worker) -> None:
    if worker.proc.poll() is None:
        worker.proc.terminate()
        try:
            worker.proc.wait(10)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
    if worker.proc.stderr:
        worker.proc.stderr.close()


@pytest.fixture
def worker(tmp_path: Path):
    running = start_worker(tmp_path)
    yield running
    stop_worker(running)


def as_uid(uid: int, argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


# A worker with the runner (codespace-fs and -patch) under a policy that hides and protects paths,
# called on its socket directly: for the runner's and the fast lane's tests.
RUNNER_POLICY = '[filesystem]\npaths = { "secret" = "none", "vendor" = "read" }\n'


@pytest.fixture
def runner_worker(tmp_path):
    worker = start_runner_worker(tmp_path, RUNNER_POLICY)
    yield worker
    stop_worker(worker)


def start_runner_worker(tmp_path: Path, policy_text: str) -> Worker:
    """A runner worker on a path socket under ``policy_text``; :func:`stop_worker` ends it."""
    ws = tmp_path / "ws"
    for rel, text in {"ok.txt": "fine\n", "secret/key.txt": "k\n", "vendor/lib.txt": "v\n", ".git/config": "c\n"}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    token_file = tmp_path / "token"
    token = make_token(token_file)
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text)
    env = {**os.environ, "CODESPACE_STATE_DIR": str(tmp_path / "state"), "CODESPACE_WORKER_POLICY": str(policy)}
    proc = subprocess.Popen(worker_argv("serve", "--workspace", str(ws), "--socket", str(directory / "worker.sock"),
                                        "--token-file", str(token_file)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wait_for_socket(directory / "worker.sock", proc)
    worker = Worker(proc, directory / "worker.sock", token, token_file, ws)
    worker.policy = policy  # type: ignore[attr-defined]
    return worker


async def runner_client(worker) -> WorkerClient:
    return await WorkerClient.connect(sockets.connect(worker.socket), worker.token, "test")


async def runner_refusal(client: WorkerClient, method: str, params: dict) -> WorkerCallError:
    with pytest.raises(WorkerCallError) as caught:
        await client.call(method, params)
    return caught.value

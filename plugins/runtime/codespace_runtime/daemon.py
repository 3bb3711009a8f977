"""Daemon mode: ``codespace-worker start|stop|status`` for one workspace.

Everything lives in ``<state dir>/worker/`` (0700): ``worker.sock``, ``worker.pid`` (locked with
``flock`` by the serving worker for its whole life, so "is it running?" never trusts a stale pid),
``token`` (0600, created on first start) and ``worker.log`` (the worker's stderr).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from codespace.contract import gate

from . import sockets, tokens
from .client import WorkerClient, WorkerError, fetch_status
from .hardening import UMASK_ENV, current_umask

PID_FILE = "worker.pid"
TOKEN_FILE = "token"
LOG_FILE = "worker.log"
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Placement:
    root: Path
    directory: Path
    socket: Path
    pid_file: Path
    token_file: Path
    log_file: Path


def placement(workspace: str | os.PathLike[str], token_file: str | None = None, *,
              shared: bool | None = None) -> Placement:
    """Where this workspace's daemon keeps its files: ``runtime.daemon_dir`` of the workspace's
    policy, else ``<state dir>/worker`` (the state directory found the way the server finds it:
    ``CODESPACE_STATE_DIR`` or the default for the workspace). ``shared`` (``start``): a server of
    another uid attaches, so the directory is made 0711, else 0700; None (``status``, ``stop``):
    either is accepted as found."""
    view = gate.open_workspace(workspace, policy_path=os.environ.get("CODESPACE_WORKER_POLICY") or None)
    chosen = view.policy.runtime.daemon_dir
    directory = Path(chosen) if chosen else Path(view.ensure_state_dir()) / sockets.SOCKET_DIR
    directory = sockets.shared_dir(directory, make_shared=shared) if shared is not False else sockets.own_dir(directory)
    return Placement(root=Path(view.root), directory=directory, socket=directory / sockets.SOCKET_NAME,
                     pid_file=directory / PID_FILE,
                     token_file=Path(token_file) if token_file else directory / TOKEN_FILE,
                     log_file=directory / LOG_FILE)


def client_token(directory: Path) -> Path:
    """The token file a server of this uid reads: its own copy when the daemon made one
    (``token.<uid>``, for a server of another uid), else the daemon's."""
    own = directory / f"{TOKEN_FILE}.{os.geteuid()}"
    return own if os.path.lexists(own) else directory / TOKEN_FILE


def copy_token_for(token_file: Path, uids: list[int]) -> None:
    """Give each uid other than ours a copy of the token it alone may read (``token.<uid>``,
    owned by it, 0600), so a server running as that uid can prove itself."""
    token = tokens.load_token(token_file)
    for uid in {u for u in uids if u != os.geteuid()}:
        target = token_file.parent / f"{TOKEN_FILE}.{uid}"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, uid, -1)
            os.fchmod(fd, 0o600)
            os.write(fd, token + b"\n")
        finally:
            os.close(fd)


def lock_pid_file(path: Path, *, shared: bool = False) -> int:
    """Lock ``path`` and write our pid in it; the descriptor holds the lock until we exit.
    ``shared``: readable by a server of another uid, which asks it whether a worker serves."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if shared:
        os.fchmod(fd, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise sockets.AlreadyServing(f"a worker is already serving (pid {_read_pid(path)}, lock {path}). "
                                     "To proceed: use it, or stop it first (codespace-worker stop).") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release_pid_file(path: Path, fd: int) -> None:
    try:
        os.unlink(path)  # while still locked: a successor's fresh file is never removed
    except FileNotFoundError:
        pass
    os.close(fd)


def running_pid(path: Path) -> int | None:
    """The pid of the worker holding ``path``'s lock, None if no worker holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(path)
    else:
        return None  # we got the lock: nobody serves
    finally:
        os.close(fd)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or "0") or None
    except (OSError, ValueError):
        return None


def status(where: Placement) -> dict:
    """Running or not, with the worker's versions from its pre-hello ``status``."""
    pid = running_pid(where.pid_file)
    report: dict = {"running": False, "pid": pid, "socket": str(where.socket), "workspace": str(where.root)}
    try:
        sock = sockets.connect(where.socket)
    except OSError as exc:
        report["problem"] = f"socket: {exc.strerror or exc}"
        return report
    try:
        answer = asyncio.run(asyncio.wait_for(fetch_status(sock), 5.0))
    except (WorkerError, TimeoutError, OSError) as exc:
        report["problem"] = f"status: {exc}"
        return report
    finally:
        sock.close()
    report.update(running=True, protocols=answer.get("protocols"), worker=answer.get("worker"))
    return report


def start(where: Placement, allow_uids: list[int], *, runner: bool = True, foreground: bool = False,
          umask: str | None = None) -> int:
    """Start the worker in the background; its pid once it answers ``status``. ``foreground``:
    become the worker instead (for a service manager, which wants the process it started).
    ``umask`` (octal): the agent's files' (default: this process's own)."""
    tokens.create_token(where.token_file)
    tokens.load_token(where.token_file)  # refuse a bad token file here, not in the log
    copy_token_for(where.token_file, allow_uids)
    pid = running_pid(where.pid_file)
    if pid is not None:
        raise sockets.AlreadyServing(f"a worker is already serving this workspace (pid {pid}, socket {where.socket})")
    argv = [sys.executable, "-m", "codespace_runtime.cli", "serve", "--workspace", str(where.root),
            "--socket", str(where.socket), "--token-file", str(where.token_file)]
    if allow_uids:  # the list replaces the default: keep this uid, which checks the start and stops it
        allow_uids = sorted({os.geteuid(), *allow_uids})
    for uid in allow_uids:
        argv += ["--allow-uid", str(uid)]
    if not runner:
        argv.append("--no-runner")
    env = dict(os.environ, **{UMASK_ENV: umask or os.environ.get(UMASK_ENV) or current_umask()})
    if foreground:
        os.execve(sys.executable, argv, env)
    log = os.open(where.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                 start_new_session=True, close_fds=True, env=env)
    finally:
        os.close(log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            raise sockets.PlacementError(f"the worker exited with status {code} while starting: "
                                         f"{_log_tail(where.log_file)}")
        if status(where)["running"]:
            return child.pid
        time.sleep(0.02)
    raise sockets.PlacementError(f"the worker did not answer within {START_TIMEOUT:.0f} s; see {where.log_file}")


def stop(where: Placement, client_name: str = "codespace-worker stop") -> str:
    """Ask the worker to shut down (an authenticated ``shutdown``), wait for it, clean up."""
    pid = running_pid(where.pid_file)
    try:
        sock = sockets.connect(where.socket)
    except OSError:
        sock = None
    if sock is None:
        if pid is not None:
            raise sockets.PlacementError(f"worker pid {pid} holds {where.pid_file} but does not answer at "
                                         f"{where.socket}. To proceed: kill {pid}.")
        _remove_stale_socket(where)
        return "no worker was serving"
    token = tokens.load_token(where.token_file)
    asyncio.run(_shutdown(sock, token, client_name))
    deadline = time.monotonic() + STOP_TIMEOUT
    while running_pid(where.pid_file) is not None:
        if time.monotonic() > deadline:
            raise sockets.PlacementError(f"the worker (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s")
        time.sleep(0.02)
    _remove_stale_socket(where)
    return f"stopped the worker (pid {pid})"


async def _shutdown(sock, token: bytes, client_name: str) -> None:
    worker = await WorkerClient.connect(sock, token, client_name)
    try:
        await worker.call("shutdown", {})
    finally:
        await worker.close()


def _remove_stale_socket(where: Placement) -> None:
    """A socket left behind by a killed worker: removed only if nobody answers on it."""
    try:
        sockets.remove_stale(where.directory, where.socket.name)
    except sockets.PlacementError:
        pass  # a live worker or something that is not a socket: not ours to remove


def _log_tail(path: Path, limit: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(nothing in the log)"
    except OSError:
        return "(no log)"

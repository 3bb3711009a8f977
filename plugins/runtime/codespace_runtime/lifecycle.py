"""Starting, watching and replacing the server's worker.

Child mode: the server starts ``codespace-worker serve --fd N`` on one end of a socket pair;
the worker hardens itself and dies with the server (parent-death signal). When it dies, the
calls it had end with what is known (sent, so they may have run; or not sent), and the next
call starts a new one. Daemon mode: the server attaches to the workspace's daemon socket and
reconnects at the next call after a drop; it never starts or stops the daemon.

What happened last is kept in ``<state dir>/worker/child-status.json`` as well, so that
``codespace doctor`` (another process) can say that a server's worker died.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from codespace.contract import RunnerLost, ToolError

from . import daemon, sockets, tokens
from .client import WorkerClient, WorkerError, WorkerGone
from .protocol import PROTOCOL
from .hardening import UMASK_ENV, current_umask
from .lane_client import spin_seconds
from .runner import POLICY_ENV, policy_digest

CLIENT_NAME = "codespace-server"
START_TIMEOUT_S = 20.0
STOP_GRACE_S = 0.5
DAEMON_GONE_WAIT_S = 2.0
"""How long a dropped daemon connection may take to show as the daemon's end (its lock released)."""
STATUS_FILE = "child-status.json"
WORKER_SCRIPT = "codespace-worker"


def worker_command() -> list[str]:
    """The worker executable of this environment (beside the interpreter, as pip installs it)."""
    beside = os.path.join(os.path.dirname(sys.executable), WORKER_SCRIPT)
    found = beside if os.access(beside, os.X_OK) else shutil.which(WORKER_SCRIPT)
    if found is None:
        raise ToolError(f"{WORKER_SCRIPT} is neither beside {sys.executable} nor on PATH; reinstall "
                        "codespace-runtime (pip install ./plugins/runtime), or set runtime.worker = \"off\"",
                        code="worker_unavailable")
    return [found]


def _is_open(client: WorkerClient) -> bool:
    state = client.is_open  # a property in later clients, a method before
    return bool(state() if callable(state) else state)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "its connection closed while the process still ran"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with status {code}"


class Worker:
    """One workspace's worker, as the server reaches it: :meth:`call` starts or reconnects as
    needed and turns a lost worker into :class:`RunnerLost`."""

    mode = "child"

    def __init__(self, workspace: Any, *, record: bool = True) -> None:
        self.workspace = workspace
        self.record = record
        """Keep the status file for ``codespace doctor`` (the doctor's own probe does not)."""
        self._client: WorkerClient | None = None
        self._lock: asyncio.Lock | None = None
        self.pid: int | None = None
        self.starts = 0
        self.last_failure: str | None = None
        self.process_tracking: dict[str, Any] | None = None  # the worker's, from its status
        self._checked = False  # the connected worker's report was read and its policy matched
        self.stopped = False
        self.expected_digest = policy_digest(getattr(workspace, "policy_path", None))
        self._listeners: list[Any] = []
        self._lost_listeners: list[Any] = []
        self._stop_listeners: list[Any] = []

    # -- state --------------------------------------------------------------------

    def serving(self) -> bool:
        """Connected, and its report checked (the policy it loaded): until then no call may use it."""
        return self._checked and self._connected()

    def _connected(self) -> bool:
        return self._client is not None and _is_open(self._client) and self._process_alive()

    def _note_idle_death(self) -> None:
        """A worker that died between calls: say so (workspace_info, doctor) before replacing it."""
        if self._checked and not self._connected() and not self.stopped:
            self.last_failure = f"the {self.mode} worker (pid {self.pid}) {self._exit_now()} while idle"
            self._record()

    def _exit_now(self) -> str:
        return "closed the connection"

    def _process_alive(self) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        self._note_idle_death()
        return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        serving = self.serving()
        starting = self._lock is not None and self._lock.locked() and not serving
        state = "serving" if serving else "starting" if starting else "died" if self.last_failure else "not started"
        out: dict[str, Any] = {
            "worker": self.mode, "serving": serving, "state": state, "pid": self.pid if serving else None,
            "protocol": PROTOCOL if serving else None, "serves": ["files", "patch", "commands"], "commands": "worker",
            "starts": self.starts,
        }
        if serving:
            out["fast_lane"] = self._client.lane_state  # type: ignore[union-attr]
            out["lane_spin_us"] = self.workspace.policy.runtime.lane_spin_us
            if self.process_tracking is not None:
                out["process_tracking"] = self.process_tracking
        if self.last_failure:
            out["last_failure"] = self.last_failure
        return out

    def _record(self) -> None:
        if not self.record:
            return
        try:
            directory = sockets.socket_dir(self.workspace.ensure_state_dir())
            tmp = directory / f".{STATUS_FILE}.{os.getpid()}"
            tmp.write_text(json.dumps({**self._snapshot(), "server_pid": os.getpid(), "at": time.time()}))
            os.replace(tmp, directory / STATUS_FILE)
        except OSError:
            pass  # a report for the doctor; never a reason to fail a call

    # -- calls --------------------------------------------------------------------

    async def client(self) -> WorkerClient:
        if self.serving():
            return self._client  # type: ignore[return-value]
        if self.stopped:
            raise RunnerLost("the server is shutting down; its worker has stopped. Retry once it is back.",
                             dispatched=False)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await asyncio.sleep(0)  # let status() see "starting" while the worker comes up
            if not self.serving():
                self._note_idle_death()
                await self._discard()
                try:
                    self._client = await asyncio.wait_for(self._connect(), START_TIMEOUT_S)
                except (WorkerError, OSError, TimeoutError, sockets.PlacementError, tokens.TokenError, ToolError) as exc:
                    self.last_failure = f"the {self.mode} worker could not be started: {exc}"
                    self._record()
                    raise RunnerLost(self.last_failure + ". Nothing ran; retry, or see the server's log (the "
                                     "worker writes to its stderr).", dispatched=False) from None
                self.starts += 1
                self._client.lane_spin_s = spin_seconds(self.workspace.policy)
                for fn in self._listeners:
                    self._client.on_notification(fn)
                for fn in self._lost_listeners:
                    self._client.on_lost(fn)
                try:
                    await self._check_digest()
                    self._checked = True
                except BaseException:
                    await self._discard()
                    raise
                finally:
                    self._record()
        return self._client  # type: ignore[return-value]

    def on_notification(self, fn: Any) -> None:
        """Call ``fn(method, params, fds)`` for each notification of this and every later connection."""
        self._listeners.append(fn)
        if self._client is not None:
            self._client.on_notification(fn)

    def on_stop(self, fn: Any) -> None:
        """``await fn()`` when the server stops the worker, before the connection closes."""
        self._stop_listeners.append(fn)

    def on_lost(self, fn: Any) -> None:
        """Call ``fn(reason)`` whenever the worker drops this or a later connection."""
        self._lost_listeners.append(fn)
        if self._client is not None:
            self._client.on_lost(fn)

    async def _check_digest(self) -> None:
        # The runner's own report: the policy it judges requests by (the welcome's digest is the
        # worker's, taken before the runner loaded the file the server named).
        status, _ = await self._client.call("status", {})  # type: ignore[union-attr]
        self.process_tracking = status.get("process_tracking")  # where the commands now run
        got = status.get("policy_digest", self._client.welcome.policy_digest)  # type: ignore[union-attr]
        if got != self.expected_digest:
            self.last_failure = (f"the worker loaded a different policy (digest {got}) than this server "
                                 f"(digest {self.expected_digest})")
            raise RunnerLost(self.last_failure + "; nothing ran. Start the server and the worker with the same "
                             "policy file.", dispatched=False)

    async def call(self, method: str, params: dict, what: str) -> dict:
        client = await self.client()
        try:
            fast = await client.call_fast(method, params)
            if fast is not None:
                return fast
            result, fds = await client.call(method, params)
        except WorkerGone as gone:
            raise await self._lost(gone, what) from None
        for fd in fds:
            os.close(fd)
        return result

    async def _lost(self, gone: WorkerGone, what: str) -> RunnerLost:
        how = await self._how_it_ended()
        self.last_failure = f"the {self.mode} worker (pid {self.pid}) {how} during {what}"
        if self._client is not None and not _is_open(self._client):
            await self._discard()  # reaped and forgotten: the next call starts another
        self._record()
        if gone.dispatched:
            tail = ("the request had been sent, so it may have run: check its effects (read the file, stat the "
                    "path) before retrying")
        else:
            tail = "the request was not sent, so nothing ran: retry it"
        again = "a new worker starts at the next call" if self.mode == "child" else "the next call reconnects"
        return RunnerLost(f"{self.last_failure}; {tail} ({again}).", dispatched=gone.dispatched,
                          details={"worker_pid": self.pid, "worker": self.mode, "ended": how})

    async def _how_it_ended(self) -> str:
        return "closed the connection"

    async def _discard(self) -> None:
        self._checked = False
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _connect(self) -> WorkerClient:
        raise NotImplementedError

    async def stop(self) -> None:
        self.stopped = True
        for fn in self._stop_listeners:
            try:
                await fn()
            except Exception:  # noqa: BLE001 - a listener's failure must not keep the worker running
                logging.getLogger(__name__).exception("a stop listener of the worker failed")
        await self._discard()


class ChildWorker(Worker):
    """``worker = "child"``: a worker process of this server, on a socket pair."""

    mode = "child"

    def __init__(self, workspace: Any, **kwargs: Any) -> None:
        super().__init__(workspace, **kwargs)
        self._popen: subprocess.Popen[bytes] | None = None
        self._token_file: Path | None = None

    def _process_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def _exit_now(self) -> str:
        return describe_exit(None if self._popen is None else self._popen.poll())

    async def _connect(self) -> WorkerClient:
        directory = sockets.socket_dir(self.workspace.ensure_state_dir())
        self._token_file = directory / f"child-{os.getpid()}.token"
        self._token_file.unlink(missing_ok=True)
        tokens.create_token(self._token_file)
        token = tokens.load_token(self._token_file)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, CODESPACE_STATE_DIR=str(self.workspace.state_dir))
        env[POLICY_ENV] = str(self.workspace.policy_path or "")
        env[UMASK_ENV] = current_umask()
        argv = [*worker_command(), "serve", "--workspace", str(self.workspace.root), "--fd", str(theirs.fileno()),
                "--token-file", str(self._token_file)]
        try:
            # From the event loop's thread: the parent-death signal follows the thread that forked.
            self._popen = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                           stdout=2, env=env, start_new_session=True)
        finally:
            theirs.close()
        self.pid = self._popen.pid
        try:
            return await WorkerClient.connect(ours, token, CLIENT_NAME)
        except BaseException:
            ours.close()
            raise

    async def _how_it_ended(self) -> str:
        if self._popen is None:
            return "was never started"
        for _ in range(100):  # the connection closes as the process exits: its status follows at once
            code = self._popen.poll()
            if code is not None:
                return describe_exit(code)
            await asyncio.sleep(0.01)
        return describe_exit(None)

    async def _discard(self) -> None:
        await super()._discard()
        popen, self._popen = self._popen, None
        if popen is not None and popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while popen.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if popen.poll() is None:
                popen.kill()
                await asyncio.to_thread(popen.wait)

    async def stop(self) -> None:
        await super().stop()
        if self._token_file is not None:
            self._token_file.unlink(missing_ok=True)
        self._record()


class DaemonAttachment(Worker):
    """``worker = "daemon"``: the workspace's daemon (``codespace-worker start``), attached to by path."""

    mode = "daemon"
    _pid_file: Path | None = None

    async def has_ended(self, wait_s: float = DAEMON_GONE_WAIT_S) -> bool:
        """Whether the daemon this server was attached to has ended (it no longer holds its pid
        file's lock, or another daemon does), waiting up to ``wait_s`` for the kernel to release
        the lock of a process whose connection has just closed. False: it still serves."""
        deadline = time.monotonic() + wait_s
        while True:
            if self._pid_file is None or daemon.running_pid(self._pid_file) != self.pid:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)

    async def _connect(self) -> WorkerClient:
        # runtime.daemon_dir when the operator set it (a daemon of another uid), else the server's
        # own state directory (it may have been given --state-dir); daemon.py's names.
        chosen = self.workspace.policy.runtime.daemon_dir
        directory = (sockets.client_dir(chosen) if chosen
                     else sockets.socket_dir(self.workspace.ensure_state_dir()))
        pid = daemon.running_pid(directory / daemon.PID_FILE)
        if pid is None:
            raise WorkerError(f"no daemon serves {self.workspace.root} (no live {directory / daemon.PID_FILE}). "
                              f"To proceed: run codespace-worker start --workspace {self.workspace.root}")
        self.pid, self._pid_file = pid, directory / daemon.PID_FILE
        token = tokens.load_token(daemon.client_token(directory))
        sock = await asyncio.to_thread(sockets.connect, directory / sockets.SOCKET_NAME)
        try:
            return await WorkerClient.connect(sock, token, CLIENT_NAME)
        except BaseException:
            sock.close()
            raise

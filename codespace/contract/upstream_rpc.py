"""A small client for the upstream binary's JSON-lines servers, the oracle of pin checks.

``codex exec-server --listen stdio`` and ``codex app-server`` speak JSON-RPC-shaped
objects, one per line, on stdin/stdout: requests carry an ``id``, the server answers
with ``result`` or ``error`` under the same id and sends notifications (``method``,
no ``id``) in between. :class:`UpstreamRpc` starts one of them with ``HOME`` in a
fresh temporary directory (so no user configuration is read), performs its
``initialize`` handshake, and offers blocking :meth:`UpstreamRpc.call`; the
notifications seen are kept in order for the caller to inspect.

Pin checks run in their own process, never in the server, so blocking calls and a
reader thread are fine here.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_PATH = "/usr/local/bin:/usr/bin:/bin"


class UpstreamRpcError(Exception):
    """The upstream server answered a request with an error object."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method}: error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message


class UpstreamRpcClosed(Exception):
    """The upstream server exited, or did not answer in time."""


class UpstreamRpc:
    """One running upstream JSON-lines server (use as a context manager)."""

    def __init__(self, argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self._home = tempfile.mkdtemp(prefix="codespace-oracle-home-")
        base = {"HOME": self._home, "PATH": _PATH, "LANG": "C.UTF-8"}
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=cwd or self._home, env={**base, **(env or {})})
        self._lines: queue.Queue[dict | None] = queue.Queue()
        self._stderr: list[bytes] = []
        self._next_id = 0
        self.notifications: list[dict] = []
        self._answers: dict[int, dict] = {}
        self._ended = False
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    @classmethod
    def exec_server(cls, codex: Path, **kwargs: Any) -> UpstreamRpc:
        """``codex exec-server --listen stdio``, initialised."""
        rpc = cls([str(codex), "exec-server", "--listen", "stdio"], **kwargs)
        try:
            rpc.call("initialize", {"clientName": "codespace-pin-check"})
            rpc.notify("initialized", {})
        except BaseException:
            rpc.close()
            raise
        return rpc

    @classmethod
    def app_server(cls, codex: Path, **kwargs: Any) -> UpstreamRpc:
        """``codex app-server`` (stdio), initialised."""
        rpc = cls([str(codex), "app-server"], **kwargs)
        try:
            rpc.call("initialize", {"clientInfo": {"name": "codespace-pin-check", "version": "0"}})
            rpc.notify("initialized", None)
        except BaseException:
            rpc.close()
            raise
        return rpc

    @property
    def home(self) -> str:
        """The server's temporary ``HOME`` (removed on close)."""
        return self._home

    def _read_stdout(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                self._lines.put(json.loads(line))
            except ValueError:
                continue  # a stray non-JSON line is not an answer to anything
        self._lines.put(None)

    def _read_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._stderr.append(line)
            del self._stderr[:-50]  # keep the tail for error messages

    def _send(self, message: dict) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message).encode() + b"\n")
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise UpstreamRpcClosed(f"the upstream server is gone: {self.stderr_tail()}") from exc

    def notify(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def request(self, method: str, params: Any) -> int:
        """Send a request without waiting; :meth:`answer` collects its answer later."""
        self._next_id += 1
        self._send({"id": self._next_id, "method": method, "params": params})
        return self._next_id

    def call(self, method: str, params: Any, *, timeout: float = 30.0) -> Any:
        """Send a request and wait for its answer: the ``result``, or raise :class:`UpstreamRpcError`."""
        return self.answer(self.request(method, params), method, timeout=timeout)

    def answer(self, ident: int, method: str, *, timeout: float = 30.0) -> Any:
        """The result of request ``ident`` (raise :class:`UpstreamRpcError` for an error answer)."""
        deadline = time.monotonic() + timeout
        while ident not in self._answers:
            if not self._take(deadline - time.monotonic()):
                if self._ended:
                    raise UpstreamRpcClosed(f"{method}: the upstream server exited ({self.stderr_tail()})")
                raise UpstreamRpcClosed(f"{method}: no answer within {timeout:.0f} s")
        message = self._answers.pop(ident)
        if "error" in message:
            error = message["error"] or {}
            raise UpstreamRpcError(method, int(error.get("code", 0)), str(error.get("message", "")))
        return message.get("result")

    def answered(self, ident: int) -> bool:
        """Whether request ``ident``'s answer has arrived (takes what is waiting, without blocking)."""
        while self._take(0):
            pass
        return ident in self._answers

    def wait_notification(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for one more message; False when none came."""
        return self._take(timeout)

    def _take(self, timeout: float) -> bool:
        if self._ended:
            return False
        try:
            message = self._lines.get(timeout=timeout) if timeout > 0 else self._lines.get_nowait()
        except queue.Empty:
            return False
        if message is None:
            self._ended = True
            return False
        if "method" in message and "id" not in message:
            self.notifications.append(message)
        elif "id" in message and "method" not in message:
            self._answers[message["id"]] = message
        return True

    def drain(self) -> None:
        """Move messages that arrived since the last call into :attr:`notifications` (and answers)."""
        while self._take(0):
            pass

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace").strip()[-500:]

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.close()
            except OSError:
                pass
            try:
                self._process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> UpstreamRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_uri(path: str | os.PathLike[str]) -> str:
    """The ``file://`` URI the exec-server's ``fs/*`` methods take for an absolute path."""
    from urllib.parse import quote

    return "file://" + quote(os.fspath(path))

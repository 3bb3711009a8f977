"""A JSON-lines client for the pinned binary's ``codex app-server``: the oracle of the pin check.

One process serves many searches: ``initialize`` once, then ``fuzzyFileSearch`` per case.
It runs with ``HOME`` set to a private temporary directory so no user config or login
reaches it (the app-server needs none for file search).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


class AppServerError(Exception):
    """The app-server died, answered with an error, or did not answer in time."""


class AppServer:
    def __init__(self, codex: Path, *, timeout: float = 60.0) -> None:
        self._home = tempfile.mkdtemp(prefix="codespace-fs-oracle-")
        self._timeout = timeout
        self._next = 0
        self._buffer = b""
        self._proc = subprocess.Popen(
            [str(codex), "app-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={"HOME": self._home, "PATH": "/usr/bin:/bin"}, cwd=self._home,
        )
        self.request("initialize", {"clientInfo": {"name": "codespace-pin-check", "version": "1"}})
        self._send({"jsonrpc": "2.0", "method": "initialized"})

    def __enter__(self) -> AppServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._home, ignore_errors=True)

    def fuzzy_file_search(self, query: str, roots: list[str]) -> list[dict]:
        return self.request("fuzzyFileSearch", {"query": query, "roots": roots})["files"]

    def request(self, method: str, params: dict) -> dict:
        self._next += 1
        ident = self._next
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        deadline = time.monotonic() + self._timeout
        while True:
            message = self._read(deadline)
            if message.get("id") != ident:
                continue  # notifications (status changes) are not answers
            if "error" in message:
                raise AppServerError(f"{method}: {message['error']}")
            return message["result"]

    def _send(self, message: dict) -> None:
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError as exc:
            raise AppServerError(f"the app-server exited (status {self._proc.poll()})") from exc

    def _read(self, deadline: float) -> dict:
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AppServerError("the app-server did not answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise AppServerError(f"the app-server exited (status {self._proc.wait()})")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

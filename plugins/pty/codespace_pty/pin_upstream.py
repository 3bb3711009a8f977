"""What a terminal session shows through the upstream binary.

Cases without a size or a resize go through ``codex exec-server`` (``process/start``
with ``tty: true``, ``process/write`` with a ``writeId``, ``process/read`` from
``afterSeq`` until ``closed``); the others through ``codex app-server``'s
``command/exec`` (``size``, ``command/exec/resize``, ``command/exec/write``), the
only upstream surface that sizes a terminal.
"""

from __future__ import annotations

import base64
import itertools
import time
from dataclasses import dataclass, field

from codespace.contract import UpstreamRpc, file_uri

from .pin_cases import Case

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "dumb", "LANG": "C.UTF-8"}
STEP_TIMEOUT_S = 10.0
_IDS = itertools.count(1)  # process ids are per connection and may not be reused


@dataclass
class Seen:
    """What one side showed for one case."""

    output: bytes = b""
    exit_code: int | None = None
    chunks: list[int] = field(default_factory=list)
    problem: str | None = None
    """The case could not be run to its end (a step's output never came, a timeout)."""


class ExecServerTerminal:
    """Sessions through one ``codex exec-server``."""

    def __init__(self, rpc: UpstreamRpc) -> None:
        self._rpc = rpc

    def run(self, case: Case) -> Seen:
        pid = f"pin-{next(_IDS)}"
        rpc, seen = self._rpc, Seen()
        rpc.call("process/start", {"processId": pid, "argv": case.argv, "cwd": file_uri(rpc.home), "env": ENV,
                                   "tty": True, "arg0": None})
        after: int | None = None
        closed = False

        def read(wait_ms: int) -> None:
            nonlocal after, closed
            answer = rpc.call("process/read", {"processId": pid, "afterSeq": after, "waitMs": wait_ms})
            for chunk in answer["chunks"]:
                data = base64.b64decode(chunk["chunk"])
                seen.output += data
                seen.chunks.append(len(data))
            # nextSeq is the next number to be given; afterSeq asks for those after it.
            after = answer["nextSeq"] - 1
            if answer["exited"]:
                seen.exit_code = answer["exitCode"]
            closed = answer["closed"]

        for number, step in enumerate(case.steps):
            start = len(seen.output)
            rpc.call("process/write", {"processId": pid, "chunk": base64.b64encode(step.write).decode(),
                                       "writeId": f"{pid}-w{number}"})
            deadline = time.monotonic() + STEP_TIMEOUT_S
            while step.wait_for and step.wait_for not in seen.output[start:] and not closed:
                if time.monotonic() > deadline:
                    seen.problem = f"step {number}: {step.wait_for!r} never appeared"
                    rpc.call("process/terminate", {"processId": pid})
                    break
                read(200)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not closed:
            if time.monotonic() > deadline:
                seen.problem = "did not end within the step timeout"
                rpc.call("process/terminate", {"processId": pid})
                deadline += STEP_TIMEOUT_S
            read(500)
        return seen


class AppServerTerminal:
    """Sized sessions through one ``codex app-server``."""

    def __init__(self, rpc: UpstreamRpc) -> None:
        self._rpc = rpc

    def run(self, case: Case) -> Seen:
        pid = f"pin-{next(_IDS)}"
        rpc, seen = self._rpc, Seen()
        params: dict = {"command": case.argv, "processId": pid, "tty": True, "cwd": rpc.home, "env": ENV,
                        "sandboxPolicy": {"type": "dangerFullAccess"}, "timeoutMs": 20_000}
        if case.size is not None:
            params["size"] = {"rows": case.size[0], "cols": case.size[1]}
        rpc.notifications.clear()
        started = rpc.request("command/exec", params)
        for number, step in enumerate(case.steps):
            if step.resize is not None:
                rpc.call("command/exec/resize", {"processId": pid,
                                                 "size": {"rows": step.resize[0], "cols": step.resize[1]}})
            if step.write:
                start = len(self._output(pid))
                rpc.call("command/exec/write", {"processId": pid,
                                                "deltaBase64": base64.b64encode(step.write).decode()})
                deadline = time.monotonic() + STEP_TIMEOUT_S
                while step.wait_for and step.wait_for not in self._output(pid)[start:]:
                    if rpc.answered(started) or time.monotonic() > deadline:
                        break
                    rpc.wait_notification(0.2)
        result = rpc.answer(started, "command/exec", timeout=30)
        rpc.drain()
        seen.exit_code = result["exitCode"]
        for note in self._deltas(pid):
            data = base64.b64decode(note["params"]["deltaBase64"])
            seen.output += data
            seen.chunks.append(len(data))
        return seen

    def _deltas(self, pid: str) -> list[dict]:
        return [n for n in self._rpc.notifications
                if n.get("method") == "command/exec/outputDelta" and n["params"].get("processId") == pid]

    def _output(self, pid: str) -> bytes:
        self._rpc.drain()
        return b"".join(base64.b64decode(n["params"]["deltaBase64"]) for n in self._deltas(pid))

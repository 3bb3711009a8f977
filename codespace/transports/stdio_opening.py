"""The opening of a stdio connection, served before the event loop exists.

A client opens with the same few messages: ``initialize``, ``notifications/initialized``,
``tools/list``, perhaps a ``ping``, and its agent waits for their answers before its first
model request. None of them needs the event loop or the App, and with a kept listing
(:mod:`.listing`) none needs a plugin: so they are answered here, on the main thread, with
blocking reads and writes, while a thread loads the plugins and their tools
(:class:`ToolsBuild`). The event loop, anyio, the transport and the bridge (about a fifth
of a start's CPU, measured) are imported once the opening is over: after ``tools/list`` is
answered, at the first line it does not serve, at end of input, or when the tools are loaded
while no line waits. The front then replays the lines served here with their answers thrown
away (:meth:`.front.Front.take`), so its state is what it would be had it served them, and
the connection takes the input from where the opening stopped.
"""

from __future__ import annotations

import os
import select
import threading
from dataclasses import dataclass, field
from typing import Any

from .front import initialize_reply, listing_reply, opening_kind, ping_reply
from .stdio_fds import READ_CHUNK, Claim, Lines
from .wire import BadMessage, parse


class ToolsBuild:
    """The workspace, its plugins and their tools (``codespace.app_parts.load_tools``), loaded
    on a thread of their own; with ``listing``, the classic listing written from them too."""

    def __init__(self, workspace: str | None, policy: str | None, state_dir: str | None, *, listing: bool) -> None:
        self._args = (workspace, policy, state_dir)
        self._listing = listing
        self.parts: tuple[Any, Any, Any] | None = None
        self.classic: bytes | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self.wake_fd, self._wake_w = os.pipe()  # readable once done: the opening polls it with its input
        threading.Thread(target=self._run, name="codespace-tools", daemon=True).start()

    def _run(self) -> None:
        try:
            from ..app_parts import load_tools

            workspace, policy, state_dir = self._args
            self.parts = load_tools(workspace, policy=policy, state_dir=state_dir)
            if self._listing:
                from .tool_wire import classic_listing

                self.classic = classic_listing(list(self.parts[2]))
        except BaseException as exc:  # noqa: BLE001 - raised again where the parts are taken
            self._error = exc
        finally:
            # The byte first: once ``done`` is set, result() may close the pipe (and its number
            # be reused for another file, which a late write would then reach).
            os.write(self._wake_w, b"!")
            self._done.set()

    def listing(self) -> bytes | None:
        """The classic listing, once written (None: the build failed or only the SDK can write it)."""
        self._done.wait()
        return self.classic

    def result(self) -> tuple[Any, Any, Any]:
        """The parts, once loaded (blocking); the build's exception if it failed."""
        self._done.wait()
        if self.wake_fd >= 0:  # the opening is over: nothing polls the pipe any more
            os.close(self.wake_fd)
            os.close(self._wake_w)
            self.wake_fd = self._wake_w = -1
        if self._error is not None:
            raise self._error
        assert self.parts is not None
        return self.parts


@dataclass
class Opening:
    """What the opening served, and where it stopped."""

    replay: list[bytes] = field(default_factory=list)  # the lines whose state the front must hold
    listed: bytes | None = None  # the listing it served, when it was built at this start
    rest: list[bytes] = field(default_factory=list)  # lines not served: the one it stopped at, and all after it
    reader: Lines = field(default_factory=Lines)  # and the line in progress
    ended: bool = False  # end of input was read (or the client went away)


def serve_opening(claim: Claim, kept: bytes | None, build: ToolsBuild) -> Opening:
    """Serve the opening messages on ``claim``'s descriptors; ``kept``: the kept listing's result."""
    opening = Opening()
    negotiated = False

    def serve(line: bytes) -> tuple[bytes | None, bool] | None:
        """(the answer, whether the opening is over with it), or None: not served here."""
        nonlocal negotiated
        try:
            message = parse(line)
        except BadMessage:
            return None  # the front answers what is wrong with it
        kind = opening_kind(message)
        if kind == "initialize" and not negotiated:
            negotiated = True
            opening.replay.append(line)
            return initialize_reply(message)[0], False
        if kind == "initialized" and negotiated:
            opening.replay.append(line)
            return None, False
        if kind == "ping":
            return ping_reply(message), False
        if kind == "tools/list" and negotiated:
            result = kept if kept is not None else build.listing()
            if result is None:
                return None
            if kept is None:
                opening.listed = result
            return listing_reply(message["id"], result), True
        return None

    while True:
        if not _wait_for_input(claim.read_fd, build):
            return opening  # the tools are loaded: the connection serves from here
        try:
            chunk = os.read(claim.read_fd, READ_CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            opening.ended = True
            return opening
        lines = opening.reader.feed(chunk)
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            served = serve(line)
            if served is None:
                opening.rest = lines[index:]
                return opening
            reply, last = served
            if reply is not None and not _write(claim.write_fd, reply + b"\n"):
                opening.ended = True
                return opening  # the client went away: the connection ends at once
            if last:
                opening.rest = lines[index + 1:]
                return opening


def _wait_for_input(fd: int, build: ToolsBuild) -> bool:
    """Until ``fd`` has input (True), or the tools are loaded with no input waiting (False)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(build.wake_fd, select.POLLIN)  # readable from the build's end on: its byte is never read
    while True:
        ready = dict(poller.poll())
        if fd in ready:
            return True
        if build.wake_fd in ready:
            return False


def _write(fd: int, data: bytes) -> bool:
    """All of ``data``, blocking; False if the reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])
        except OSError:
            return False
    return True

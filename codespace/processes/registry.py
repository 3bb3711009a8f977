"""The registry of command sessions the server started.

Sessions belong to the server, not to the MCP request or the client connection
that started them: they run in the registry's own task group, so a client can
disconnect and re-attach by id. Each is tied to its operation record (the process
group is recorded for crash recovery; the record is finished when the command
ends). At most ``limits.max_sessions`` exist; when full, the eight most recently
used are protected and the least recently used finished session (else running
one whose exec call has returned) is evicted; with none, a new command is refused.
"""

from __future__ import annotations

import logging
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..contract import CommandSpec, SessionRecords, ToolError
from ..contract.sandbox import Sandbox, SandboxCleanup, SandboxFastPath, SandboxLayout
from ..store import proc_start_ticks
from .buffer import OutputBuffer
from ..procfs import table
from .janitor import run_detached
from .session import DRAIN_AFTER_EXIT_S, ProcessHandle, Session
from .spawn import (PipeProcess, check_cwd, check_exec_size, close_parent_copies, feed_payloads, prepare_inherited,
                    resolve_program, spawn_error)
from .tracking import Tracker, populated, wrap_argv

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..contract.backends import Backends
    from ..workspace import Workspace

log = logging.getLogger(__name__)

PROTECTED_RECENT = 8
SHUTDOWN_GRACE_S = 1.0


class _TerminalAdapter:
    """A Terminal backend's process seen through the registry's ProcessHandle."""

    def __init__(self, terminal_process: Any) -> None:
        self._tp = terminal_process
        self.pid = terminal_process.pid

    async def write(self, data: bytes) -> None:
        await self._tp.write(data)

    def resize(self, rows: int, cols: int) -> None:
        self._tp.resize(rows, cols)

    def signal_group(self, signum: int) -> None:
        self._tp.signal_group(signum)

    async def wait(self) -> int:
        return await self._tp.wait()

    def close(self) -> None:
        self._tp.close()


@dataclass
class _Started:
    """A process just started, before it becomes a session."""

    spec: CommandSpec  # as started: wrapped by the sandbox unless it took the fast path
    process: ProcessHandle
    readers: list[Callable[[], Awaitable[bytes]]]  # stdout (or the terminal), then stderr
    group: Path | None  # its cgroup; None on the fast path or without cgroups (a subreaper holds it then)
    writers: list[tuple[int, bytes]]  # payloads still to feed to inherited descriptors
    fast: bool  # started by the sandbox's fast path


async def _emptied(group: Path, within_s: float = 1.0) -> None:
    """Wait (briefly) for the processes a finished command left in its cgroup, killed when it
    exited (Session.run), to be gone."""
    deadline = time.monotonic() + within_s
    while populated(group) and time.monotonic() < deadline:
        await anyio.sleep(0.01)


class ProcessRegistry:
    def __init__(self, workspace: Workspace, backends: Backends, records: SessionRecords) -> None:
        self.workspace = workspace
        self.backends = backends
        self.records = records
        self._sessions: dict[str, Session] = {}
        self._tg: TaskGroup | None = None
        self._counter = 0
        self._sandbox_ended: dict[str, Callable[[], None]] = {}  # session id -> its sandbox's command_ended
        self.tracker = Tracker(workspace.state_dir)
        self._stopped = False  # shutdown() ran to its end; a second call has nothing to do
        # Set by a server that exits right after its shutdown (stdio): the sandbox clean-ups of
        # the sessions it stops run in a detached child (see janitor) instead of before the exit.
        self.detach_cleanups = False
        self._deferred: list[Callable[[], None]] | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ProcessRegistry]:
        # Before any command: what a crashed predecessor's commands left in their cgroups dies.
        await anyio.to_thread.run_sync(self.tracker.start)
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self.shutdown()
                    await anyio.to_thread.run_sync(self.tracker.stop)
                for session in self._sessions.values():
                    session.abandon()  # one whose process would not die must not hold the stop
                self._tg = None
                tg.cancel_scope.cancel()

    async def shutdown(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Terminate every session (clean server stop): SIGTERM to all, then SIGKILL to what is
        left of any session after ``grace_s``, including leftovers of sessions that ended before.

        The sessions are signalled together, from one process table per round: a client
        stopping the server allows it about 100 ms, and a pass over /proc costs milliseconds."""
        live = [s for s in self._sessions.values() if not s.finished.is_set()]
        if not live and self._stopped:
            return
        if self.detach_cleanups:
            self._deferred = []
        procs = table()
        for session in live:
            session.terminated_by = "shutdown"
            session.kill(signal.SIGTERM, procs)
        with anyio.move_on_after(grace_s):
            for session in live:
                await session.exited.wait()
        procs = table()
        for session in self._sessions.values():
            if session.running and session.terminated_by is None:
                # Started while the first round ran (its spawn was still being awaited): the
                # shutdown ends it too, and its exec call must say so, not report exit 137
                # (found as a rare CI failure).
                session.terminated_by = "shutdown"
                live.append(session)
            if session.running or session.leftovers(procs):
                session.kill(signal.SIGKILL, procs)
        with anyio.move_on_after(DRAIN_AFTER_EXIT_S + 1):
            for session in live:
                await session.settled.wait()  # recorded, before the store closes
        self._stopped = True
        deferred, self._deferred = self._deferred, None
        if deferred:
            run_detached(deferred)

    # -- sessions ----------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            known = ", ".join(self._sessions) or "none"
            raise ToolError(
                f"no session {session_id!r} (it finished and was evicted, or the server restarted); "
                f"live sessions: {known}. list_sessions shows them.",
                code="no_session",
            )
        session.touch()
        return session

    def sessions(self) -> list[Session]:
        return sorted(self._sessions.values(), key=lambda s: s.started)

    def forget(self, session: Session) -> None:
        """Drop a finished session whose output has been fully delivered."""
        if session.finished.is_set():
            self._sessions.pop(session.id, None)

    async def _make_room(self) -> None:
        limit = self.workspace.limits.max_sessions
        while len(self._sessions) >= limit:
            by_use = sorted(self._sessions.values(), key=lambda s: s.last_used)
            protected = min(PROTECTED_RECENT, max(0, limit - 1))
            # Never a command whose exec call is still waiting on it: that call would answer with
            # a SIGKILL nobody asked for (found by testing: 7 of 100 concurrent exec calls did).
            candidates = [s for s in by_use[: len(by_use) - protected] if s.detached or s.finished.is_set()]
            victim = next((s for s in candidates if s.finished.is_set()), None) or (candidates[0] if candidates else None)
            if victim is None:
                waiting = sum(1 for s in self._sessions.values() if not s.detached and not s.finished.is_set())
                raise ToolError(
                    f"all {limit} command sessions (limits.max_sessions) are in use, {waiting} of them by exec calls "
                    "still waiting for their command, and no older one may be ended to make room; nothing was "
                    "started. To proceed: wait for a call to return and run this again, end a session with "
                    "terminate (list_sessions shows them), or ask the operator to raise limits.max_sessions.",
                    code="too_many_sessions",
                )
            log.info("evicting session %s (pid %s)", victim.id, victim.pid)
            self._sessions.pop(victim.id, None)
            if not victim.finished.is_set():
                victim.terminated_by = "evicted"
                await victim.terminate(signal.SIGKILL, 0)

    async def start(
        self,
        spec: CommandSpec,
        *,
        operation_id: str | None,
        timeout_s: float | None,
        separate_stderr: bool,
        lossless: bool,
        sandbox: tuple[Sandbox, SandboxLayout] | None = None,
    ) -> Session:
        """Start ``spec``; ``sandbox`` is (backend, layout) when the command must be confined."""
        if self._tg is None:
            raise ToolError("the server is shutting down; no new commands", code="shutting_down")
        check_exec_size(spec)
        await self._make_room()
        requested = spec.argv  # what list_sessions shows: the user's command, not a wrapper's argv
        started = await self._spawn(spec, sandbox)
        spec = started.spec
        cap = self.workspace.limits.output_cap_bytes
        out = OutputBuffer(cap, lossless=lossless)
        err = OutputBuffer(cap, lossless=lossless) if separate_stderr and not spec.tty else None
        readers = [(out, started.readers[0])]
        if len(started.readers) > 1:
            readers.append((err or out, started.readers[1]))
        self._counter += 1
        session = Session(
            id=f"s{self._counter}-{secrets.token_hex(3)}",
            process=started.process,
            argv=requested,
            tty=spec.tty,
            interactive=spec.interactive or spec.tty,
            operation_id=operation_id,
            out=out,
            err=err,
            readers=readers,
            timeout_s=timeout_s,
            on_finish=self._finished,
            group=started.group,
            keeper=started.fast or started.group is None,  # the sandbox's fast-path helper is a subreaper too
            sandboxed=sandbox is not None,
        )
        self._sessions[session.id] = session
        if sandbox is not None and isinstance(sandbox[0], SandboxCleanup):
            self._sandbox_ended[session.id] = sandbox[0].command_ended
        if operation_id is not None:
            await self.records.started(operation_id, session.pid, proc_start_ticks(session.pid))
        self._tg.start_soon(session.run)
        if started.writers:
            self._tg.start_soon(feed_payloads, started.writers)
        return session

    async def _spawn(self, spec: CommandSpec, sandbox: tuple[Sandbox, SandboxLayout] | None) -> _Started:
        """Start the process by the road its spec and sandbox call for: the sandbox's fast path
        (pipe sessions), the Terminal backend (tty), or a pipe spawn here."""
        fast = sandbox is not None and not spec.tty and isinstance(sandbox[0], SandboxFastPath)
        if sandbox is not None and not fast:
            spec = sandbox[0].wrap(spec, sandbox[1])
        spec, writers = prepare_inherited(spec)
        group = None
        try:
            # A sandboxed command's process limit is the sandbox's (counted in its own user
            # namespace); an unsandboxed one's is its cgroup's, where the host has a pids hierarchy.
            if not fast:
                group = self.tracker.new_group(self.workspace.policy.sandbox.max_processes if sandbox is None else 0)
            limit = self.tracker.limit_dir(group)
            if fast:
                pipe = await PipeProcess.launch(spec, *sandbox)
                return _Started(spec, pipe, [lambda: pipe.read("stdout"), lambda: pipe.read("stderr")], group, writers, fast)
            if spec.tty:
                terminal = await self._spawn_terminal(spec, group, limit)
                return _Started(spec, _TerminalAdapter(terminal), [terminal.read], group, writers, fast)
            pipe = PipeProcess.spawn(spec, group, limit)
            return _Started(spec, pipe, [lambda: pipe.read("stdout"), lambda: pipe.read("stderr")], group, writers, fast)
        except BaseException:
            if group is not None:
                self.tracker.release(group)
            raise
        finally:
            close_parent_copies(spec)

    async def _spawn_terminal(self, spec: CommandSpec, group: Path | None, limit: Path | None) -> Any:
        terminal = self.backends.terminal()
        try:
            check_cwd(spec.cwd)
            resolve_program(spec)  # a missing program is named, not the stub's exit 127
            spec = spec.model_copy(update={"argv": wrap_argv(group, spec.argv, limit)})
            return await terminal.spawn(spec)
        except OSError as exc:
            raise spawn_error(exc, spec) from exc

    async def _finished(self, session: Session) -> None:
        """Close the operation of a session whose exec call returned while it still ran."""
        ended = self._sandbox_ended.pop(session.id, None)
        if ended is not None and self._deferred is not None:
            self._deferred.append(ended)
        elif ended is not None:
            try:
                ended()  # e.g. placeholders on the host that no running command needs any more
            except Exception:  # noqa: BLE001 - a backend's clean-up must not lose the record below
                log.exception("the sandbox's clean-up after session %s failed", session.id)
        if session.group is not None:
            await _emptied(session.group)
            if self.tracker.release(session.group):
                session.group = None  # empty and gone; one that would not empty is killed again at shutdown
        if not session.detached or session.operation_id is None:
            return
        try:
            await self.records.ended(session.operation_id, session.status(), shutdown=session.terminated_by == "shutdown")
        except Exception:  # noqa: BLE001 - one lost record must not end the registry's other sessions
            log.exception("cannot record the end of session %s", session.id)

"""The command tools' work on the sessions of this process (the contract's ``CommandSessions``).

The server runs it on its own registry; a worker that owns the sessions runs the same class
on its registry, behind its socket. Everything that depends on where the command runs is
here: the command line and environment (built from this process's policy and environment),
the sandbox decision, starting, waiting, cursors and the session's lifecycle. The tools
(:mod:`codespace.tools.commands`) only hand arguments over and shape the result.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import anyio

from .. import sandboxing
from ..contract import CommandSpec, ToolError
from ..policy import build_env, refused_extra
from ..processes.session import MAX_PENDING_INPUT
from .command_models import (
    DEFAULT_YIELD_MS, INTERACTIVE_YIELD_MS, CommandOutput, ExecArgs, ReadOutputArgs, ResizeArgs, ResizeResult,
    SessionInfo, SessionList, TerminateArgs, WriteStdinArgs,
)

if TYPE_CHECKING:
    from ..contract import Backends
    from ..processes import ProcessRegistry
    from ..processes.session import Session
    from ..workspace import Workspace

PIPE_DEFAULTS = {"PAGER": "cat", "GIT_PAGER": "cat"}  # a pager on a pipe would wait forever
CANCEL_GRACE_S = 0.5  # a cancelled exec: SIGTERM, then SIGKILL after this long
CANCEL_NOTE = (
    "cancelled (by the client, or by the server stopping) before exec returned: the command was stopped "
    f"(SIGTERM to its process group and session, SIGKILL after {CANCEL_GRACE_S:g} s) and nothing of it runs on. "
    "To run it again, call exec with a new operation_id (or none)."
)


def command_spec(ws: Workspace, args: ExecArgs) -> CommandSpec:
    """What to spawn for ``exec``: this process's policy (shell, environment rules) applied
    to the agent's request."""
    argv = args.command if isinstance(args.command, list) else [*ws.policy.commands.shell, args.command]
    env = build_env(ws.policy.env, os.environ, args.env)
    if args.tty:
        env.setdefault("TERM", "xterm-256color")
    else:
        for key, value in PIPE_DEFAULTS.items():
            env.setdefault(key, value)
    if ws.policy.network.access == "off":
        env["CODESPACE_SANDBOX_NETWORK_DISABLED"] = "1"
    return CommandSpec(
        argv=argv, cwd=args.cwd or str(ws.root), env=env, tty=args.tty, rows=args.rows, cols=args.cols,
        interactive=args.tty or args.interactive or args.stdin is not None, operation_id=args.operation_id,
    )


def _next_step(session_id: str, running: bool) -> str:
    # Codex and Claude Code show the model only the structured result, not the text's hints.
    if running:
        return (f"still running: call read_output (wait_ms waits for more), write_stdin or terminate with "
                f"session_id {session_id!r}")
    return f"more output is left: call read_output with session_id {session_id!r}"


class LocalSessions:
    """Command sessions in this process's registry."""

    def __init__(self, workspace: Workspace, backends: Backends, registry: ProcessRegistry) -> None:
        self.workspace = workspace
        self.backends = backends
        self.registry = registry

    def _max_bytes(self, requested: int | None) -> int:
        cap = self.workspace.limits.output_cap_bytes
        return min(requested or self.workspace.limits.max_read_bytes, cap)

    def _result(self, session: Session, max_bytes: int, *, after: int | None = None, after_err: int | None = None,
                env_dropped: list[str] | None = None, note: str | None = None) -> dict:
        taken = session.take(max_bytes, after, after_err)
        status = session.status()
        keep = session.still_needed()
        if not keep:
            self.registry.forget(session)
        hint = None
        input_pending, input_note = session.input_status()
        note = "; ".join(filter(None, [note, input_note])) or None
        if session.sandboxed and not status["running"]:
            hint = sandboxing.denial_hint(self.workspace, session.output_tail() + taken.text + (taken.stderr_text or ""),
                                          status["exit_code"])
            if hint is not None and hint.likely:
                note = "; ".join(filter(None, [note, hint.detail]))
        return CommandOutput(
            session_id=session.id if keep else None, **status, output=taken.text, stderr=taken.stderr_text,
            seq=taken.start, next_seq=taken.end, stderr_seq=taken.stderr_start, next_stderr_seq=taken.stderr_end,
            omitted_bytes=taken.dropped, stderr_omitted_bytes=taken.stderr_dropped if session.err is not None else None,
            pid=session.pid, tty=session.tty, sandboxed=session.sandboxed, duration_ms=session.duration_ms(),
            env_dropped=env_dropped or [], input_pending_bytes=input_pending,
            sandbox_denied=hint.likely if hint else None,
            sandbox_rule=hint.rule if hint else None, note=note,
            next_step=_next_step(session.id, status["running"]) if keep else None,
        ).model_dump(mode="json")

    async def exec(self, params: dict, operation_id: str | None) -> dict:
        args = ExecArgs.model_validate({**params, "operation_id": operation_id})
        ws, limits = self.workspace, self.workspace.limits
        decision = self.backends.sandbox_decision()  # the core's decision, the one plugins are told too
        spec = command_spec(ws, args)
        interactive = args.tty or args.interactive
        timeout_ms = args.timeout_ms or (None if interactive else limits.exec_timeout_ms)
        if timeout_ms is not None:
            timeout_ms = min(timeout_ms, limits.max_exec_timeout_ms)
        stdin = args.stdin.encode() if args.stdin is not None else None
        if stdin is not None and len(stdin) > MAX_PENDING_INPUT:
            raise ToolError(f"stdin is {len(stdin)} bytes, more than the {MAX_PENDING_INPUT} a session may hold "
                            "for its command; nothing was started. To proceed: write the data to a file in the "
                            "workspace and redirect it (command < file).", code="invalid_arguments")
        # Shielded: a cancellation arriving while the command starts must find the session to stop.
        with anyio.CancelScope(shield=True):
            session = await self.registry.start(
                spec, operation_id=operation_id, timeout_s=timeout_ms / 1000 if timeout_ms else None,
                separate_stderr=args.separate_stderr, lossless=args.lossless,
                sandbox=(decision.backend, decision.layout) if decision.backend is not None else None,
            )
        try:
            if stdin is not None:
                session.send(stdin, close=not interactive)
            yield_ms = args.yield_ms if args.yield_ms is not None else (INTERACTIVE_YIELD_MS if interactive else DEFAULT_YIELD_MS)
            await session.wait_for(deadline=time.monotonic() + yield_ms / 1000,
                                   quiet_s=args.quiet_ms / 1000 if interactive else None, baseline=0)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._stop_cancelled(session)
            raise
        # From the start, not the session's cursor: this is the command's first answer, and a
        # terminate or read_output sent meanwhile must not leave it empty (found by testing from
        # outside: exec answered exit 143 and no output, and its stored record the same).
        result = self._result(session, self._max_bytes(args.max_bytes), after=0, after_err=0,
                              env_dropped=refused_extra(ws.policy.env, args.env), note=decision.note)
        if session.terminated_by == "shutdown" and not result["running"]:
            # Not the command's own end: the call fails, and its record says cancelled, as a
            # detached session's does (a retry then learns the shutdown stopped it).
            ended = f"signal {result['signal']}" if result["signal"] else f"exit code {result['exit_code']}"
            raise ToolError(f"the server shut down while the command ran; it was terminated ({ended}). Its output "
                            "so far is in details.output. To proceed: run it again once the server is back.",
                            code="shutting_down", details=result)
        if result["running"]:
            session.detach()
        return result

    async def _stop_cancelled(self, session: Session) -> None:
        """The client gave up on the exec call before it returned (notifications/cancelled, a
        client-side tool timeout): the command is stopped, so nothing runs that no call reports
        on. (A command whose exec call already returned a session_id is not affected.)"""
        await session.terminate(signal.SIGTERM, CANCEL_GRACE_S)
        self.registry.forget(session)

    async def write_stdin(self, params: dict) -> dict:
        args = WriteStdinArgs.model_validate(params)
        session = self.registry.get(args.session_id)
        baseline = session.output_total()
        if args.close_stdin and session.tty:
            raise ToolError("a terminal session has no stdin of its own to close; nothing was written. To proceed: "
                            "send '\\x04' (Ctrl-D) at the start of a line as chars, as typing would.",
                            code="invalid_argument", details={"argument": "close_stdin"})
        if args.chars or args.close_stdin:
            session.send(args.chars.encode(), close=args.close_stdin)
        await session.wait_for(deadline=time.monotonic() + args.yield_ms / 1000, quiet_s=args.quiet_ms / 1000,
                               baseline=baseline)
        return self._result(session, self._max_bytes(args.max_bytes))

    async def read_output(self, params: dict) -> dict:
        args = ReadOutputArgs.model_validate(params)
        session = self.registry.get(args.session_id)
        if args.after_stderr_seq is not None and session.err is None:
            raise ToolError("after_stderr_seq is for sessions started with separate_stderr; this session's stderr is "
                            "merged into its output. To proceed: use after_seq alone.",
                            code="invalid_argument", details={"argument": "after_stderr_seq"})
        for argument, cursor, stderr in (("after_seq", args.after_seq, False),
                                         ("after_stderr_seq", args.after_stderr_seq, True)):
            end = session.output_end(stderr=stderr)
            if cursor is not None and cursor > end:
                # Found by testing from outside: the cursor moved there, and the output written up
                # to it was never shown.
                next_name = "next_stderr_seq" if stderr else "next_seq"
                raise ToolError(f"{argument} {cursor} is past the end of the output read so far ({next_name} "
                                f"{end}). To proceed: pass a {next_name} an earlier call returned, or omit {argument}.",
                                code="invalid_argument", details={"argument": argument, next_name: end})
        if args.wait_ms and session.caught_up(args.after_seq, args.after_stderr_seq):
            await session.wait_for(deadline=time.monotonic() + args.wait_ms / 1000, quiet_s=0,
                                   baseline=session.output_total())
        return self._result(session, self._max_bytes(args.max_bytes), after=args.after_seq,
                            after_err=args.after_stderr_seq)

    async def resize(self, params: dict) -> dict:
        args = ResizeArgs.model_validate(params)
        session = self.registry.get(args.session_id)
        session.resize(args.rows, args.cols)
        return ResizeResult(session_id=session.id, rows=args.rows, cols=args.cols).model_dump(mode="json")

    async def terminate(self, params: dict) -> dict:
        args = TerminateArgs.model_validate(params)
        session = self.registry.get(args.session_id)
        await session.terminate(getattr(signal, f"SIG{args.signal}"), args.grace_ms / 1000)
        return self._result(session, self._max_bytes(None))

    async def list_sessions(self, params: dict) -> dict:
        return SessionList(
            sessions=[
                SessionInfo(
                    session_id=s.id, command=s.argv, pid=s.pid, tty=s.tty, running=s.running,
                    exit_code=s.status()["exit_code"], operation_id=s.operation_id, started_at=s.started_wall,
                    unread_bytes=s.unread_bytes(),
                )
                for s in self.registry.sessions()
            ],
            limit=self.workspace.limits.max_sessions,
        ).model_dump(mode="json")


def no_sessions() -> ToolError:
    return ToolError("process management is not available in this server", code="no_processes")

"""Command tools: exec, write_stdin, read_output, resize, terminate, list_sessions.

Process management is the core's (codespace.processes); ``tty: true`` sessions
come from the Terminal backend (plugins/pty), and every command is wrapped by the
Sandbox backend when the policy calls for one.
"""

import os
import signal
import time

import anyio

from .. import sandboxing
from ..contract import CommandSpec, ToolError
from ..plugins import hookimpl
from ..policy import build_env, refused_extra
from ..processes.session import Session
from ..tooling import Needs, ToolCall, ToolDefinition, ToolRegistrar
from .command_models import (
    DEFAULT_YIELD_MS,
    INTERACTIVE_YIELD_MS,
    CommandOutput,
    ExecArgs,
    ListSessionsArgs,
    ReadOutputArgs,
    ResizeArgs,
    ResizeResult,
    SessionInfo,
    SessionList,
    TerminateArgs,
    WriteStdinArgs,
)

PIPE_DEFAULTS = {"PAGER": "cat", "GIT_PAGER": "cat"}  # a pager on a pipe would wait forever
CANCEL_GRACE_S = 0.5  # a cancelled exec: SIGTERM, then SIGKILL after this long


# -- helpers ---------------------------------------------------------------------


def _registry(call: ToolCall):  # noqa: ANN202
    if call.processes is None:
        raise ToolError("process management is not available in this server", code="no_processes")
    return call.processes


def _max_bytes(call: ToolCall, requested: int | None) -> int:
    cap = call.workspace.limits.output_cap_bytes
    return min(requested or call.workspace.limits.max_read_bytes, cap)


def _result(call: ToolCall, session: Session, max_bytes: int, *, after: int | None = None,
            env_dropped: list[str] | None = None, note: str | None = None) -> CommandOutput:
    taken = session.take(max_bytes, after)
    status = session.status()
    keep = session.still_needed()
    if not keep:
        _registry(call).forget(session)
    hint = None
    if session.sandboxed and not status["running"]:
        hint = sandboxing.denial_hint(call.workspace, session.output_tail() + taken.text + (taken.stderr_text or ""),
                                      status["exit_code"])
        if hint is not None and hint.likely:
            note = "; ".join(filter(None, [note, hint.detail]))
    return CommandOutput(
        session_id=session.id if keep else None,
        **status,
        output=taken.text,
        stderr=taken.stderr_text,
        seq=taken.start,
        next_seq=taken.end,
        omitted_bytes=taken.dropped + taken.stderr_dropped,
        pid=session.pid,
        tty=session.tty,
        sandboxed=session.sandboxed,
        duration_ms=session.duration_ms(),
        env_dropped=env_dropped or [],
        sandbox_denied=hint.likely if hint else None,
        sandbox_rule=hint.rule if hint else None,
        note=note,
        next_step=_next_step(session.id, status["running"]) if keep else None,
    )


def _next_step(session_id: str, running: bool) -> str:
    # Codex and Claude Code show the model only the structured result, not the text's hints.
    if running:
        return (f"still running: call read_output (wait_ms waits for more), write_stdin or terminate with "
                f"session_id {session_id!r}")
    return f"more output is left: call read_output with session_id {session_id!r}"


def _render(result: CommandOutput) -> str:
    text = result.output
    if result.stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + result.stderr
    if result.running:
        status = f"[still running: session {result.session_id}; use write_stdin, read_output or terminate]"
    elif result.timed_out:
        status = f"[timed out after {result.duration_ms} ms; process group killed; exit code 124]"
    else:
        status = f"[exit {result.exit_code}{' (' + result.signal + ')' if result.signal else ''} in {result.duration_ms} ms]"
        if result.session_id:
            status += f" [more output: read_output session {result.session_id}]"
    if result.note:
        status += f"\n[note: {result.note}]"
    return (text + ("\n" if text and not text.endswith("\n") else "") + status) if text else status


# -- exec --------------------------------------------------------------------------


def _exec_needs(args: ExecArgs, call: ToolCall) -> Needs:
    if isinstance(args.command, list):
        return Needs(argv=[args.command])
    return Needs(shell=[args.command])


async def exec_command(call: ToolCall, args: ExecArgs) -> CommandOutput:
    ws = call.workspace
    limits = ws.limits
    decision = call.backends.sandbox_decision()  # the core's decision, the one plugins are told too
    argv = args.command if isinstance(args.command, list) else [*ws.policy.commands.shell, args.command]
    interactive = args.tty or args.interactive
    env = build_env(ws.policy.env, os.environ, args.env)
    for key, value in PIPE_DEFAULTS.items():
        if not args.tty:
            env.setdefault(key, value)
    if args.tty:
        env.setdefault("TERM", "xterm-256color")
    if ws.policy.network.access == "off":
        env["CODESPACE_SANDBOX_NETWORK_DISABLED"] = "1"
    spec = CommandSpec(
        argv=argv, cwd=args.cwd or str(ws.root), env=env, tty=args.tty, rows=args.rows, cols=args.cols,
        interactive=interactive or args.stdin is not None, operation_id=call.operation_id,
    )
    timeout_ms = args.timeout_ms or (None if interactive else limits.exec_timeout_ms)
    if timeout_ms is not None:
        timeout_ms = min(timeout_ms, limits.max_exec_timeout_ms)
    # Shielded: a cancellation arriving while the command starts must find the session to stop.
    with anyio.CancelScope(shield=True):
        session = await _registry(call).start(
            spec, operation_id=call.operation_id, timeout_s=timeout_ms / 1000 if timeout_ms else None,
            separate_stderr=args.separate_stderr, lossless=args.lossless,
            sandbox=(decision.backend, decision.layout) if decision.backend is not None else None,
        )
    try:
        if args.stdin is not None:
            await session.feed_stdin(args.stdin, close=not interactive)
        yield_ms = args.yield_ms if args.yield_ms is not None else (INTERACTIVE_YIELD_MS if interactive else DEFAULT_YIELD_MS)
        await session.wait_for(deadline=time.monotonic() + yield_ms / 1000,
                               quiet_s=args.quiet_ms / 1000 if interactive else None, baseline=0)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _stop_cancelled(call, session)
        raise
    result = _result(call, session, _max_bytes(call, args.max_bytes),
                     env_dropped=refused_extra(ws.policy.env, args.env), note=decision.note)
    if result.running:
        session.detach()
        call.detach()
    return result


async def _stop_cancelled(call: ToolCall, session: Session) -> None:
    """The client gave up on the exec call before it returned (notifications/cancelled, a
    client-side tool timeout): the command is stopped, so nothing runs that no call reports
    on, and the record says so. A retry with the same operation_id replays ``cancelled``; a
    new operation_id runs the command again. (A command whose exec call already returned a
    session_id is not affected: the call had finished.)"""
    await session.terminate(signal.SIGTERM, CANCEL_GRACE_S)
    _registry(call).forget(session)
    status = session.status()
    ended = f"exit code {status['exit_code']}" + (f", {status['signal']}" if status.get("signal") else "")
    call.cancel_note = (
        "cancelled (by the client, or by the server stopping) before exec returned: the command was stopped "
        f"(SIGTERM to its process group and session, SIGKILL after {CANCEL_GRACE_S:g} s; {ended}) and nothing of "
        "it runs on. To run it again, call exec with a new operation_id (or none)."
    )


async def write_stdin(call: ToolCall, args: WriteStdinArgs) -> CommandOutput:
    session = _registry(call).get(args.session_id)
    baseline = session.output_total()
    if args.chars:
        await session.send(args.chars)
    await session.wait_for(deadline=time.monotonic() + args.yield_ms / 1000, quiet_s=args.quiet_ms / 1000, baseline=baseline)
    return _result(call, session, _max_bytes(call, args.max_bytes))


async def read_output(call: ToolCall, args: ReadOutputArgs) -> CommandOutput:
    session = _registry(call).get(args.session_id)
    if args.wait_ms and session.caught_up(args.after_seq):
        await session.wait_for(deadline=time.monotonic() + args.wait_ms / 1000, quiet_s=0, baseline=session.output_total())
    return _result(call, session, _max_bytes(call, args.max_bytes), after=args.after_seq)


async def resize(call: ToolCall, args: ResizeArgs) -> ResizeResult:
    session = _registry(call).get(args.session_id)
    session.resize(args.rows, args.cols)
    return ResizeResult(session_id=session.id, rows=args.rows, cols=args.cols)


async def terminate(call: ToolCall, args: TerminateArgs) -> CommandOutput:
    session = _registry(call).get(args.session_id)
    await session.terminate(getattr(signal, f"SIG{args.signal}"), args.grace_ms / 1000)
    return _result(call, session, _max_bytes(call, None))


async def list_sessions(call: ToolCall, args: ListSessionsArgs) -> SessionList:
    registry = _registry(call)
    return SessionList(
        sessions=[
            SessionInfo(
                session_id=s.id, command=s.argv, pid=s.pid, tty=s.tty, running=s.running,
                exit_code=s.status()["exit_code"], operation_id=s.operation_id, started_at=s.started_wall,
                unread_bytes=s.unread_bytes(),
            )
            for s in registry.sessions()
        ],
        limit=call.workspace.limits.max_sessions,
    )


@hookimpl
def codespace_register_tools(register: ToolRegistrar) -> None:
    register(ToolDefinition(
        name="exec",
        description="Run a command (argv list, or a shell string run with the policy's shell) in the workspace, "
        "sandboxed when the policy says so. Returns the output so far and the exit code, or a session_id if it "
        "still runs after yield_ms (then use read_output / write_stdin / terminate). tty=true gives a terminal. "
        "Timeouts kill the whole process group (exit 124).",
        arguments=ExecArgs, result=CommandOutput, handler=exec_command, destructive=True, open_world=True,
        paths={"cwd": "read"}, needs=_exec_needs, render=_render,
    ))
    register(ToolDefinition(
        name="write_stdin",
        description="Send text to a running session's stdin or terminal (control characters pass through; "
        "'\\x03' interrupts) and return the output that follows, as soon as it goes quiet or the process exits. "
        "Empty chars polls.",
        arguments=WriteStdinArgs, result=CommandOutput, handler=write_stdin, destructive=True, render=_render,
    ))
    register(ToolDefinition(
        name="read_output",
        description="Read a session's output from a sequence cursor (after_seq; default where the last call "
        "stopped), so nothing is lost or repeated; wait_ms waits for new output or exit.",
        arguments=ReadOutputArgs, result=CommandOutput, handler=read_output, read_only=True, render=_render,
    ))
    register(ToolDefinition(
        name="resize",
        description="Resize a tty session's terminal (rows x cols); the program gets SIGWINCH.",
        arguments=ResizeArgs, result=ResizeResult, handler=resize, idempotent=True,
    ))
    register(ToolDefinition(
        name="terminate",
        description="Stop or kill a running command (session): the signal (default TERM) to its whole process "
        "group and session, then SIGKILL to anything left after grace_ms. Returns the final output and exit status.",
        arguments=TerminateArgs, result=CommandOutput, handler=terminate, destructive=True, idempotent=True,
        render=_render,
    ))
    register(ToolDefinition(
        name="list_sessions",
        description="List command sessions: id, command, pid, terminal or not, running or exit code, unread bytes.",
        arguments=ListSessionsArgs, result=SessionList, handler=list_sessions, read_only=True,
    ))

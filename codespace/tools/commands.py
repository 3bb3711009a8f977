"""Command tools: exec, write_stdin, read_output, resize, terminate, list_sessions.

Process management is the core's (codespace.processes); ``tty: true`` sessions
come from the Terminal backend (plugins/pty), and every command is wrapped by the
Sandbox backend when the policy calls for one.
"""

import os
import signal
import time
from typing import Literal

import anyio
from pydantic import Field, field_validator

from .. import sandboxing
from ..contract import CommandSpec, ToolError
from ..models import Model, Strict
from ..plugins import hookimpl
from ..policy import build_env, refused_extra
from ..processes.session import Session
from ..tooling import Needs, OperationArgs, ToolCall, ToolDefinition, ToolRegistrar

DEFAULT_YIELD_MS = 10_000
INTERACTIVE_YIELD_MS = 1_000
MAX_YIELD_MS = 300_000
DEFAULT_QUIET_MS = 100  # an interactive session that printed and then went quiet is waiting for input
PIPE_DEFAULTS = {"PAGER": "cat", "GIT_PAGER": "cat"}  # a pager on a pipe would wait forever
CANCEL_GRACE_S = 0.5  # a cancelled exec: SIGTERM, then SIGKILL after this long


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not contain a NUL byte")
    return value


class ExecArgs(OperationArgs):
    command: list[str] | str = Field(
        description="An argv list (run directly, no shell) or a shell string (run with the policy's shell)."
    )
    cwd: str | None = Field(default=None, description="Working directory, relative to the workspace root (default: the root).")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables; names the policy excludes are dropped and listed in env_dropped.",
    )
    tty: bool = Field(default=False, description="Run on a pseudo-terminal (interactive programs, REPLs, full-screen tools).")
    interactive: bool = Field(default=False, description="Keep stdin open for write_stdin (implied by tty).")
    stdin: str | None = Field(default=None, description="Text written to stdin first; closed afterwards unless interactive.")
    timeout_ms: int | None = Field(
        default=None, ge=1,
        description="Kill the whole process group after this long (exit code 124, timed_out=true). Default: the "
        "policy's limits.exec_timeout_ms for non-interactive commands, none for tty/interactive sessions.",
    )
    yield_ms: int | None = Field(
        default=None, ge=0, le=MAX_YIELD_MS,
        description="Longest wait before returning with a session_id if the command still runs (default 10000; "
        "1000 for tty/interactive). Returns earlier on exit, and for interactive sessions once output went quiet.",
    )
    max_bytes: int | None = Field(default=None, ge=1, description="Cap on output returned by this call (default: limits.max_read_bytes).")
    quiet_ms: int = Field(
        default=DEFAULT_QUIET_MS, ge=0, le=60_000,
        description="Interactive sessions: return once output has arrived and then stayed quiet this long "
        "(0: at the first output).",
    )
    separate_stderr: bool = Field(default=False, description="Keep stderr apart (field 'stderr') instead of merging by arrival.")
    lossless: bool = Field(
        default=False,
        description="Never drop output: the command blocks when the buffer is full until you read_output. "
        "Default: keep the head and the tail and count the omitted middle.",
    )
    rows: int = Field(default=24, ge=1, le=1000, description="Terminal rows (tty).")
    cols: int = Field(default=80, ge=1, le=1000, description="Terminal columns (tty).")

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list):
            if not value or not value[0]:
                raise ValueError("an argv list needs at least the program")
            for arg in value:
                _no_nul(arg)
        elif not value.strip():
            raise ValueError("the shell command is empty")
        return _no_nul(value) if isinstance(value, str) else value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not key or "=" in key or "\0" in key or "\0" in val:
                raise ValueError(f"invalid environment variable {key!r}")
        return value


class CommandOutput(Model):
    session_id: str | None = Field(description="Set while the command runs or output remains unread; pass to read_output, write_stdin, terminate.")
    running: bool
    exit_code: int | None = Field(description="Exit code; 124 on timeout; 128+N when killed by signal N.")
    signal: str | None = Field(default=None, description="Signal that ended the command, e.g. 'SIGKILL'.")
    timed_out: bool = False
    output: str = Field(description="Output since the previous call (stdout and stderr merged by arrival unless separated).")
    stderr: str | None = Field(default=None, description="stderr, when separate_stderr was set.")
    seq: int = Field(description="Stream offset where this output starts.")
    next_seq: int = Field(description="Offset after this output: pass as after_seq to read from here.")
    omitted_bytes: int = Field(default=0, description="Bytes dropped before this output (buffer overflow).")
    pid: int
    tty: bool
    sandboxed: bool
    duration_ms: int
    env_dropped: list[str] = Field(default_factory=list, description="Requested variables the policy dropped.")
    sandbox_denied: bool | None = Field(
        default=None, description="For a failed sandboxed command: whether the sandbox likely denied it."
    )
    sandbox_rule: str | None = Field(default=None, description="The policy rule (path or network) that likely applied.")
    note: str | None = None
    next_step: str | None = Field(
        default=None, description="What to call next, while the command runs or output is left unread.",
    )


class SessionArgs(Strict):
    session_id: str = Field(min_length=1, description="The session_id exec returned.")


class WriteStdinArgs(OperationArgs):
    session_id: str = Field(min_length=1, description="The session_id exec returned.")
    chars: str = Field(default="", description="Text to send (control characters pass through: '\\x03' is Ctrl-C); empty polls.")
    yield_ms: int = Field(default=INTERACTIVE_YIELD_MS, ge=0, le=MAX_YIELD_MS, description="Longest wait for output after writing.")
    quiet_ms: int = Field(
        default=DEFAULT_QUIET_MS, ge=0, le=60_000,
        description="Interactive sessions: return once output has arrived and then stayed quiet this long "
        "(0: at the first output).",
    )
    max_bytes: int | None = Field(default=None, ge=1, description="Cap on output returned.")


class ReadOutputArgs(SessionArgs):
    after_seq: int | None = Field(default=None, ge=0, description="Read from this offset (default: where the last call stopped).")
    max_bytes: int | None = Field(default=None, ge=1, description="Cap on output returned.")
    wait_ms: int = Field(default=0, ge=0, le=MAX_YIELD_MS, description="Wait up to this long for new output or exit.")


class ResizeArgs(OperationArgs):
    session_id: str = Field(min_length=1, description="A tty session.")
    rows: int = Field(ge=1, le=1000, description="Terminal rows.")
    cols: int = Field(ge=1, le=1000, description="Terminal columns.")


class ResizeResult(Model):
    session_id: str
    rows: int
    cols: int


class TerminateArgs(OperationArgs):
    session_id: str = Field(min_length=1, description="The session to stop.")
    signal: Literal["TERM", "INT", "HUP", "QUIT", "KILL"] = Field(default="TERM", description="First signal, sent to the whole group.")
    grace_ms: int = Field(default=2000, ge=0, le=60_000, description="Then SIGKILL to everything left after this long.")


class ListSessionsArgs(Strict):
    pass


class SessionInfo(Model):
    session_id: str
    command: list[str]
    pid: int
    tty: bool
    running: bool
    exit_code: int | None
    operation_id: str | None
    started_at: float = Field(description="Unix time.")
    unread_bytes: int


class SessionList(Model):
    sessions: list[SessionInfo]
    limit: int


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
    unread = session.delivered < session.out.total or (session.err is not None and session.delivered_err < session.err.total)
    keep = status["running"] or unread or not session.finished.is_set()
    if not keep:
        _registry(call).forget(session)
    hint = None
    if session.sandboxed and not status["running"]:
        hint = sandboxing.denial_hint(call.workspace, session.out.tail_text() + taken.text + (taken.stderr_text or ""),
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
        duration_ms=int(((session.ended_at or time.monotonic()) - session.started) * 1000),
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
    decision = sandboxing.decide(ws, call.backends)
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
            await session.process.write(args.stdin.encode())
            if not interactive and hasattr(session.process, "close_stdin"):
                session.process.close_stdin()
        yield_ms = args.yield_ms if args.yield_ms is not None else (INTERACTIVE_YIELD_MS if interactive else DEFAULT_YIELD_MS)
        await session.wait_for(deadline=time.monotonic() + yield_ms / 1000,
                               quiet_s=args.quiet_ms / 1000 if interactive else None, baseline=0)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _stop_cancelled(call, session)
        raise
    session.sandboxed = decision.backend is not None
    result = _result(call, session, _max_bytes(call, args.max_bytes),
                     env_dropped=refused_extra(ws.policy.env, args.env), note=decision.note)
    if result.running:
        session.detached = True
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
        if not session.running:
            raise ToolError(f"session {session.id} has exited; read_output returns what is left", code="exited")
        await session.process.write(args.chars.encode())
    await session.wait_for(deadline=time.monotonic() + args.yield_ms / 1000, quiet_s=args.quiet_ms / 1000, baseline=baseline)
    return _result(call, session, _max_bytes(call, args.max_bytes))


async def read_output(call: ToolCall, args: ReadOutputArgs) -> CommandOutput:
    session = _registry(call).get(args.session_id)
    cursor = session.delivered if args.after_seq is None else args.after_seq
    if args.wait_ms and cursor >= session.out.total:
        await session.wait_for(deadline=time.monotonic() + args.wait_ms / 1000, quiet_s=0, baseline=session.output_total())
    return _result(call, session, _max_bytes(call, args.max_bytes), after=args.after_seq)


async def resize(call: ToolCall, args: ResizeArgs) -> ResizeResult:
    session = _registry(call).get(args.session_id)
    if not session.tty:
        raise ToolError(f"session {session.id} is not a terminal; only tty=true sessions can be resized", code="not_a_terminal")
    session.process.resize(args.rows, args.cols)
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
                unread_bytes=(s.out.total - s.delivered) + ((s.err.total - s.delivered_err) if s.err else 0),
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

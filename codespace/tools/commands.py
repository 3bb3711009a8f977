"""Command tools: exec, write_stdin, read_output, resize, terminate, list_sessions.

The work is done by the workspace's command sessions (the contract's ``CommandSessions``):
the server's own (:mod:`codespace.tools.command_sessions` on :mod:`codespace.processes`), or
a worker's when the policy puts commands behind one. ``tty: true`` sessions come from the
Terminal backend (plugins/pty), and every command is wrapped by the Sandbox backend when
the policy calls for one.
"""

import anyio

from ..plugins import hookimpl
from ..tooling import Needs, ToolCall, ToolDefinition, ToolRegistrar
from .command_models import (
    CommandOutput,
    ExecArgs,
    ListSessionsArgs,
    ReadOutputArgs,
    ResizeArgs,
    ResizeResult,
    SessionList,
    TerminateArgs,
    WriteStdinArgs,
)
from .command_sessions import CANCEL_NOTE, no_sessions


def _sessions(call: ToolCall):  # noqa: ANN202 - the contract's CommandSessions
    if call.sessions is None:
        raise no_sessions()
    return call.sessions


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


def _exec_needs(args: ExecArgs, call: ToolCall) -> Needs:
    if isinstance(args.command, list):
        return Needs(argv=[args.command])
    return Needs(shell=[args.command])


def _params(args: object) -> dict:
    return args.model_dump(mode="json", exclude={"operation_id"})  # type: ignore[attr-defined]


async def exec_command(call: ToolCall, args: ExecArgs) -> CommandOutput:
    try:
        result = CommandOutput.model_validate(await _sessions(call).exec(_params(args), call.operation_id))
    except anyio.get_cancelled_exc_class():
        call.cancel_note = CANCEL_NOTE  # the sessions' owner stopped the command before re-raising
        raise
    if result.running:
        call.detach()  # the sessions' owner finishes the record when the command ends
    return result


async def write_stdin(call: ToolCall, args: WriteStdinArgs) -> CommandOutput:
    return CommandOutput.model_validate(await _sessions(call).write_stdin(_params(args)))


async def read_output(call: ToolCall, args: ReadOutputArgs) -> CommandOutput:
    return CommandOutput.model_validate(await _sessions(call).read_output(_params(args)))


async def resize(call: ToolCall, args: ResizeArgs) -> ResizeResult:
    return ResizeResult.model_validate(await _sessions(call).resize(_params(args)))


async def terminate(call: ToolCall, args: TerminateArgs) -> CommandOutput:
    return CommandOutput.model_validate(await _sessions(call).terminate(_params(args)))


async def list_sessions(call: ToolCall, args: ListSessionsArgs) -> SessionList:
    return SessionList.model_validate(await _sessions(call).list_sessions(_params(args)))


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
        description="Send text to a running session's stdin or terminal (on a tty '\\x03' interrupts; without one, "
        "close_stdin ends the input) and return the output that follows, as soon as it goes quiet or the process "
        "exits. Empty chars polls.",
        arguments=WriteStdinArgs, result=CommandOutput, handler=write_stdin, destructive=True, render=_render,
    ))
    register(ToolDefinition(
        name="read_output",
        description="Read a session's output from a sequence cursor (after_seq, and after_stderr_seq for a separate "
        "stderr; default after the furthest output read so far), so nothing is lost or repeated; wait_ms waits for new output "
        "or exit.",
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

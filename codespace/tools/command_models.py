"""The arguments and results of the command tools (see :mod:`codespace.tools.commands`)."""

from typing import Literal

from pydantic import Field, field_validator

from ..models import Model, Strict
from ..tooling import OperationArgs

DEFAULT_YIELD_MS = 10_000
INTERACTIVE_YIELD_MS = 1_000
MAX_YIELD_MS = 300_000
DEFAULT_QUIET_MS = 100  # an interactive session that printed and then went quiet is waiting for input


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
    stderr_seq: int | None = Field(default=None, description="With separate_stderr: stderr's offset where this stderr starts.")
    next_stderr_seq: int | None = Field(
        default=None, description="With separate_stderr: the offset after this stderr; pass as after_stderr_seq to read from here.",
    )
    omitted_bytes: int = Field(
        default=0, description="Bytes of output the buffer dropped (it keeps the head and the tail) between seq and "
        "next_seq; a '... N bytes omitted ...' line in output marks where. max_bytes counts the command's bytes, "
        "not that line.",
    )
    stderr_omitted_bytes: int | None = Field(
        default=None, description="With separate_stderr: the same for stderr, between stderr_seq and next_stderr_seq.",
    )
    pid: int
    tty: bool
    sandboxed: bool
    duration_ms: int
    env_dropped: list[str] = Field(default_factory=list, description="Requested variables the policy dropped.")
    input_pending_bytes: int = Field(
        default=0, description="Input (stdin, chars) the command has not read yet; it is written as the command reads.",
    )
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
    chars: str = Field(
        default="", description="Text to send; empty polls. On a tty control characters act as typed: '\\x03' is "
        "Ctrl-C, '\\x04' at the start of a line ends input. Without a tty they are bytes like any other: end the "
        "input with close_stdin, stop the command with terminate.",
    )
    close_stdin: bool = Field(
        default=False, description="Sessions without a tty: end the command's stdin once chars are written (it "
        "sees end of input).",
    )
    yield_ms: int = Field(default=INTERACTIVE_YIELD_MS, ge=0, le=MAX_YIELD_MS, description="Longest wait for output after writing.")
    quiet_ms: int = Field(
        default=DEFAULT_QUIET_MS, ge=0, le=60_000,
        description="Interactive sessions: return once output has arrived and then stayed quiet this long "
        "(0: at the first output).",
    )
    max_bytes: int | None = Field(default=None, ge=1, description="Cap on output returned.")


class ReadOutputArgs(SessionArgs):
    after_seq: int | None = Field(
        default=None, ge=0, description="Read from this offset (default: after the furthest output read so far).",
    )
    after_stderr_seq: int | None = Field(
        default=None, ge=0,
        description="Sessions with separate_stderr: read stderr from this offset (default: after the furthest stderr "
        "read so far).",
    )
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

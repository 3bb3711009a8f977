"""Command execution: the spec the host spawns and the Terminal backend contract.

The host owns process management (registry, pipes, timeouts, cursors, reaping);
a Terminal backend only knows how to start a command on a pseudo-terminal and
move bytes. A Sandbox backend rewrites a spec before either spawns it.
"""

from typing import Protocol, runtime_checkable

from pydantic import Field

from ..models import Strict


class CommandSpec(Strict):
    """What to run: built by the host from the policy and the agent's request."""


    argv: list[str] = Field(min_length=1)
    cwd: str
    env: dict[str, str]
    tty: bool = False
    rows: int = 24
    cols: int = 80
    interactive: bool = Field(default=False, description="Keep stdin open for write_stdin; else /dev/null.")
    inherit: dict[str, bytes] = Field(
        default_factory=dict,
        description="Named payloads the child reads from inherited pipes (the sandbox handshake travels "
        "this way, never on argv or stdin). The spawner tells the child each pipe's descriptor number in "
        "the environment variable CODESPACE_FD_<NAME> (name upper-cased).",
    )
    operation_id: str | None = Field(
        default=None,
        description="The operation that started the command (``exec``'s operation id), so a backend can "
        "attribute what the command does (e.g. the egress proxy's decisions) to it.",
    )
    pass_fds: list[int] = Field(
        default_factory=list,
        description="Set by the host, not by plugins: descriptors (already open in the server) the child "
        "inherits, e.g. the pipes carrying ``inherit`` payloads. A Terminal backend passes them through.",
    )


@runtime_checkable
class TerminalProcess(Protocol):
    """A running command attached to a pseudo-terminal; the child leads its own
    session, so its pid is its process-group id."""

    pid: int

    async def read(self) -> bytes:
        """The next chunk of output (at most 8 KiB in upstream's shape); b"" at end."""

    async def write(self, data: bytes) -> None:
        """Write to the terminal in order; control characters pass through."""

    def resize(self, rows: int, cols: int) -> None: ...

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the whole process group."""

    async def wait(self) -> int:
        """Exit status: the code, or -N when killed by signal N."""

    def close(self) -> None:
        """Release the master side (after the group is gone)."""


@runtime_checkable
class Terminal(Protocol):
    """The terminal backend (plugins/pty implements it)."""

    async def spawn(self, spec: CommandSpec) -> TerminalProcess: ...


class SessionRecords(Protocol):
    """Where the owner of command sessions reports what the operation store must hold: the
    core's store in the server, notifications to the server in a worker."""

    async def started(self, operation_id: str, pid: int, start_ticks: int | None) -> None:
        """An ``exec`` operation's command started (its process group, for crash recovery)."""

    async def ended(self, operation_id: str, status: dict, *, shutdown: bool) -> None:
        """A command whose ``exec`` call had returned while it ran has ended: ``status`` is its
        final ``running``/``exit_code``/``signal``/``timed_out``; ``shutdown``: it was ended by
        the stop of whatever owned it (the record says ``cancelled``)."""

    async def lost(self, operation_id: str, reason: str) -> None:
        """The process that owned the command died with it (a worker crash): the operation is
        ``interrupted``, and ``reason`` says what happened and what to do."""


@runtime_checkable
class CommandSessions(Protocol):
    """The command tools' work, wherever the sessions live (the server's own registry, or a
    worker's). Arguments are the tool's arguments as JSON (paths already absolute, checked by
    the gateway), results the tool's result as JSON; errors are the contract's exceptions.
    A cancelled ``exec`` stops its command before the cancellation propagates."""

    async def exec(self, params: dict, operation_id: str | None) -> dict: ...

    async def write_stdin(self, params: dict) -> dict: ...

    async def read_output(self, params: dict) -> dict: ...

    async def resize(self, params: dict) -> dict: ...

    async def terminate(self, params: dict) -> dict: ...

    async def list_sessions(self, params: dict) -> dict: ...

"""The Sandbox backend contract: turn a command spec into a confined one."""

from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from ..models import Strict
from .commands import CommandSpec


class SandboxLayout(Strict):
    """The policy as a sandbox sees it, derived from the same rules the gateway uses."""


    readable: list[str] = Field(description="Absolute roots readable (``/`` for the whole host).")
    writable: list[str] = Field(description="Absolute roots writable, shallowest first.")
    deny_read: list[str] = Field(description="Absolute paths hidden entirely.")
    protected: list[str] = Field(description="Absolute paths kept read-only inside writable roots.")
    protected_names: list[str] = Field(description="Names that must stay read-only (and uncreatable) at each writable root.")
    network: Literal["off", "proxy", "on"]
    proxy_socket: str | None = Field(default=None, description="Unix socket of the host-side proxy when network is 'proxy'.")


class SandboxInfo(Strict):

    engine: str = Field(description="Engine in use, e.g. 'bubblewrap' or 'landlock'.")
    available: bool
    landlock_abi: int | None = None
    cannot_enforce: list[str] = Field(default_factory=list, description="Policy features this engine cannot enforce here.")
    detail: str = ""
    engines: list[str] = Field(
        default_factory=list,
        description="Engine names this backend offers, the values ``[sandbox] engine`` may take besides 'auto' "
        "(empty: the backend does not say, and any name is passed to it).",
    )


@runtime_checkable
class LaunchedProcess(Protocol):
    """A command a sandbox started itself (see :meth:`SandboxFastPath.launch`)."""

    pid: int
    """Leader of the command's own session and process group, as the host sees it."""

    async def wait(self) -> int:
        """Its exit status: the code, or -N when killed by signal N."""

    def release(self) -> None:
        """The host is done with the process (it has exited and its output is read)."""


@runtime_checkable
class Sandbox(Protocol):
    """The sandbox backend (plugins/linux_sandbox implements it).

    ``wrap`` is required: the host spawns what it returns (terminal sessions always
    go this way). A backend may also implement :class:`SandboxFastPath` (the host then
    lets it start pipe sessions itself) and :class:`SandboxCleanup` (the host tells it
    when each command it confined has ended); the host tests for them with ``isinstance``.
    """

    def info(self) -> SandboxInfo: ...

    def wrap(self, spec: CommandSpec, layout: SandboxLayout) -> CommandSpec:
        """Return the spec to spawn instead: the helper's argv, with the handshake in ``inherit``."""


@runtime_checkable
class SandboxFastPath(Protocol):
    """Optional for a :class:`Sandbox`: it starts a confined pipe command itself, e.g. from a
    helper that was started once, instead of the host spawning what ``wrap`` returns."""

    async def launch(self, spec: CommandSpec, layout: SandboxLayout, stdio: tuple[int, int, int]) -> LaunchedProcess:
        """Start ``spec`` confined to ``layout`` with ``stdio`` (three descriptors the host
        created) as its stdin, stdout and stderr."""


@runtime_checkable
class SandboxCleanup(Protocol):
    """Optional for a :class:`Sandbox`: it is told when each command it confined has ended."""

    def command_ended(self) -> None:
        """Called once per confined command, however it ended (exit, timeout, terminate, its
        helper killed): where the backend undoes what it set up on the host for commands."""

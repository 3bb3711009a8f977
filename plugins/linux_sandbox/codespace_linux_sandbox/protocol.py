"""The sandbox-helper handshake, protocol version 1: CodeSpace-owned data, no upstream types.

Runs in the server.

The server builds a :class:`Handshake` for every sandboxed command and hands its JSON to the
helper over an inherited pipe (``CommandSpec.inherit["handshake"]``, descriptor number in
``CODESPACE_FD_HANDSHAKE``), never on argv or the command's stdin. The seccomp program
travels the same way as raw BPF (``inherit["seccomp"]``). The helper does not import
pydantic (its start-up is on every command's critical path); :mod:`.handshake` reads the
same JSON with a hand-written check of the version and the required fields, and a test
keeps the two in step.

This module depends on pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = 1

Engine = Literal["bubblewrap", "landlock"]
Network = Literal["off", "proxy", "on"]
SeccompMode = Literal["restricted", "restricted_unix", "proxy_routed", "proxy_tcp", "vsock_restricted", "none"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProxyRoute(_Model):
    """This command's route to the egress proxy (network 'proxy'), see :mod:`.proxy_route`."""

    socket: str = Field(
        description="Absolute path of the route's Unix socket: the helper registers there (and, under "
        "bubblewrap, hands over the listener it opened inside the sandbox); never visible to the command.",
    )
    port: int = Field(
        ge=1, le=65535,
        description="Loopback port the command's proxy variables point at: inside the sandbox's network "
        "namespace (bubblewrap) or the host's loopback listener the proxy opened for this command (Landlock).",
    )


class Policy(_Model):
    """The workspace policy as the sandbox enforces it (the gateway's PathRules, flattened)."""

    readable: list[str] = Field(description="Absolute roots readable ('/' for the whole host).")
    writable: list[str] = Field(description="Absolute roots writable, shallowest first; missing ones are skipped.")
    deny_read: list[str] = Field(
        description="Absolute paths hidden entirely. '/proc' and '/dev' are satisfied by the sandbox's own "
        "proc and minimal dev rather than masked.",
    )
    protected: list[str] = Field(description="Absolute paths kept read-only (and uncreatable) inside writable roots.")
    network: Network
    proxy: ProxyRoute | None = None
    allow_unix_sockets: dict[str, str] = Field(
        default_factory=dict,
        description="With the network off, the addresses a command may connect() to (the listed paths and "
        "their resolved forms) -> the resolved host path the helper connects to on its behalf (seccomp mode "
        "'restricted_unix').",
    )


class Command(_Model):
    argv: list[str] = Field(min_length=1)
    cwd: str
    env: dict[str, str] = Field(description="The command's whole environment (LD_* included when the policy keeps them).")


class RunAs(_Model):
    """The command's host ids when the server runs as root (a command never runs as host root)."""

    uid: int = Field(ge=1, le=4294967294)
    gid: int = Field(ge=1, le=4294967294)
    idmap: bool = Field(
        default=False,
        description="Show on-disk ids 0 as uid/gid through idmapped mounts (a root-owned workspace): what the "
        "command creates is written as 0, the owner's ids.",
    )


class Options(_Model):
    """Mechanism choices the server made once (probes, compiled filters)."""

    seccomp: SeccompMode = Field(description="Which filter the 'seccomp' payload holds ('none': no payload).")
    mount_proc: bool = Field(default=True, description="False when the /proc preflight showed bwrap cannot mount proc.")
    bwrap: str | None = Field(default=None, description="Absolute path of bwrap (bubblewrap engine).")
    run_dir: str = Field(description="Private 0700 directory for the helper's bookkeeping (placeholder locks).")
    landlock_abi: int | None = Field(default=None, description="Best Landlock ABI of the kernel, probed by the server.")
    runtime: list[str] = Field(
        default_factory=list,
        description="The server's Python installation and import path: kept visible (read-only, where the "
        "policy lets the command read them) when a private /tmp would hide them, so helpers such as "
        "codespace-patch's run from a venv or checkout under /tmp.",
    )
    run_as: RunAs | None = Field(
        default=None,
        description="Set (and required) when the server runs as root: the unprivileged ids the command runs as.",
    )
    max_processes: int | None = Field(
        default=None, ge=1,
        description="RLIMIT_NPROC of the command, set inside its own user namespace (bubblewrap engine): the "
        "most processes and threads it may have at a time. None: no limit.",
    )


class Handshake(_Model):
    version: Literal[1] = PROTOCOL_VERSION
    engine: Engine
    command: Command
    policy: Policy
    options: Options

    def encode(self) -> bytes:
        return self.model_dump_json().encode()

"""The policy file (TOML) as pydantic models, with safe defaults when absent.

The policy is operator configuration: no tool lets the agent change it. Unknown
keys are errors (a typo must not silently weaken a rule), and every error names
the file, the field and the problem.
"""

from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..models import Strict
# The values defaults are made of live in defaults.py, which reads them without pydantic.
from .defaults import DEFAULT_PROTECTED_ANCHORED, DEFAULT_PROTECTED_NAMES, Access, MiB, all_protected, merged_paths

UPSTREAM_READ_CEILING = 512 * MiB  # codex-file-system refuses reads above this


class _Strict(Strict):
    model_config = ConfigDict(frozen=True)


class FilesystemPolicy(_Strict):
    paths: dict[str, Access] = Field(default_factory=dict)
    """Path entries merged over DEFAULT_PATHS. Relative entries are relative to the
    workspace, ``~`` is the server user's home. The most specific entry wins; ties go
    to the more restrictive access; a path no entry covers is ``none``."""
    protected: list[str] = Field(default_factory=lambda: [*DEFAULT_PROTECTED_NAMES, *DEFAULT_PROTECTED_ANCHORED])
    """Read-only inside writable roots: a bare name matches at any depth, an entry
    with a leading ``/`` is anchored at each writable root."""
    extra_protected: list[str] = Field(default_factory=list)
    """Added to ``protected`` (so the defaults need not be repeated)."""
    symlinks: Literal["within_root", "never"] = "within_root"
    """``within_root``: relative links whose target stays inside the root being
    accessed are followed, and the object finally reached is checked against the
    policy again; ``never``: any link in a path is refused."""
    hardlinks: Literal["allow", "refuse"] = "allow"
    """``allow``: the file tools read a regular file whatever its link count (a hard
    link made inside a readable root to a file elsewhere is read through, as upstream
    does); ``refuse``: while the policy hides anything, reading a regular file with
    more than one link is refused (writes always refuse multiply-linked files)."""
    home: Literal["credentials", "hidden"] = "credentials"
    """``credentials``: the home directory is readable except the credential stores
    the defaults hide; ``hidden``: the whole home directory is hidden except the
    workspace and ``home_readable`` (an explicit ``paths`` entry still wins)."""
    home_readable: list[str] = Field(default_factory=list)
    """With ``home = "hidden"``: directories under ``~`` that commands need, made
    readable (toolchains: ``~/.cargo/bin``, ``~/.rustup``, ``~/.local/bin``...)."""

    @field_validator("paths")
    @classmethod
    def _no_empty_paths(cls, value: dict[str, Access]) -> dict[str, Access]:
        for key in value:
            if not key or "\0" in key:
                raise ValueError(f"path entry {key!r} is empty or contains a NUL byte")
        return value

    @field_validator("protected", "extra_protected")
    @classmethod
    def _protected_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            stripped = entry.strip("/")
            if not stripped or ".." in stripped.split("/"):
                raise ValueError(f"protected entry {entry!r} must name a path inside the root (no '..')")
        return value

    @field_validator("home_readable")
    @classmethod
    def _home_entries(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not (entry == "~" or entry.startswith("~/")) or ".." in entry.split("/"):
                raise ValueError(f"home_readable entry {entry!r} must start with '~/' and hold no '..'")
        return value

    def merged_paths(self) -> dict[str, Access]:
        return merged_paths(self)

    def all_protected(self) -> list[str]:
        return all_protected(self)


class CommandRule(_Strict):
    program: str
    """Glob matched against the program's base name, or against its path when the
    pattern contains a ``/``."""
    args: list[str] | None = None
    """Glob patterns matched against argv[1:] as a prefix; ``**`` matches all the
    remaining arguments. None matches any arguments."""
    decision: Literal["allow", "deny"]
    reason: str = ""


class CommandsPolicy(_Strict):
    default: Literal["allow", "deny"] = "allow"
    """Decision for a command no rule matches. Any matching deny rule wins."""
    rules: list[CommandRule] = Field(default_factory=list)
    shell: list[str] = Field(default_factory=lambda: ["/bin/bash", "-c"])
    """How a shell-string command runs: the string is appended as the last argument."""
    opaque_shell: Literal["allow", "deny"] = "allow"
    """Shell strings whose simple commands cannot be seen statically (command
    substitution, ``eval``, ``source``...): allow them, or refuse them."""

    @field_validator("shell")
    @classmethod
    def _shell_nonempty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("shell must name a program, e.g. ['/bin/bash', '-c']")
        return value


class EnvPolicy(_Strict):
    inherit: Literal["all", "none", "core"] = "core"
    """Start from the server's whole environment, nothing, or the core variables
    (PATH SHELL TMPDIR TEMP TMP HOME LANG LC_ALL LC_CTYPE LOGNAME USER)."""
    ignore_default_excludes: bool = False
    """Keep names matching *KEY*, *SECRET*, *TOKEN* (dropped by default)."""
    exclude: list[str] = Field(default_factory=list)
    set: dict[str, str] = Field(default_factory=dict)
    include_only: list[str] = Field(default_factory=list)


class NetworkPolicy(_Strict):
    access: Literal["off", "allowlist", "on"] = "off"
    allowed_domains: list[str] = Field(default_factory=list)
    denied_domains: list[str] = Field(default_factory=list)
    mode: Literal["full", "limited"] = "full"
    """``limited``: plain HTTP requests may only use GET, HEAD and OPTIONS."""
    allow_local_binding: bool = False
    allow_wildcard: bool = False
    """A bare ``*`` in allowed_domains is refused unless this is true."""
    enable_socks5_udp: bool = False
    """Relay UDP through the proxy's SOCKS5 (UDP ASSOCIATE), each datagram's destination judged
    like a connection's. Off: UDP ASSOCIATE is refused (reply 7)."""
    allow_unix_sockets: list[str] = Field(default_factory=list)
    """Host Unix sockets (absolute paths, or ``~/...``) sandboxed commands may connect() to while
    the network is off; every other socket outside the sandbox stays unreachable. The sandbox
    reports how they are reached (and what that cannot enforce) in ``cannot_enforce``."""

    @field_validator("allow_unix_sockets")
    @classmethod
    def _unix_sockets(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not (entry.startswith("/") or entry.startswith("~/")) or "\0" in entry:
                raise ValueError(f"allow_unix_sockets entry {entry!r} must be an absolute path (or ~/...) of a socket")
        return value

    @model_validator(mode="after")
    def _wildcard(self) -> "NetworkPolicy":
        if "*" in self.allowed_domains and not self.allow_wildcard:
            raise ValueError("a bare '*' in allowed_domains allows every host; set allow_wildcard = true to mean it")
        return self


class SandboxPolicy(_Strict):
    mode: Literal["auto", "required", "off"] = "auto"
    """``auto``: sandbox commands whenever the policy restricts anything and an
    engine works; ``required``: refuse to run commands when no engine works;
    ``off``: never sandbox."""
    engine: str = Field(default="auto", pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    """``auto`` or the name of an engine the sandbox plugin offers (``codespace doctor``
    lists them; the sandbox plugin's ``SandboxInfo.engines``). The core refuses commands
    when it names none the installed sandbox offers, whatever ``mode`` says."""
    run_as_uid: int = Field(default=65534, ge=1, le=4294967294)
    """Host uid of sandboxed commands when the server runs as root and the workspace
    is owned by root (a command never runs as host root; a workspace owned by another
    user runs its commands as that user). 65534 (``nobody``) owns nothing by convention."""
    run_as_gid: int = Field(default=65534, ge=1, le=4294967294)
    """Host gid that goes with ``run_as_uid``."""
    max_processes: int = Field(default=4096, ge=0, le=4_194_304)
    """Most processes and threads one sandboxed command may have at a time (its own, counted in
    the sandbox's private user namespace: other commands and the host's processes do not count);
    past it fork and thread creation fail with EAGAIN, so a fork bomb ends the command, not the
    host. 0: no limit. Enforced by engines that give each command its own user namespace
    (bubblewrap; Landlock where the server may make user namespaces); an engine that cannot
    says so in ``cannot_enforce``. An unsandboxed command is held to it by a cgroup v1 ``pids``
    group where the host has one the server may write (``workspace_info``'s
    ``process_tracking.unsandboxed_process_limit`` says whether)."""


class Limits(_Strict):
    max_argument_bytes: int = Field(default=4 * MiB, ge=1024)
    """Size of one tool call's arguments, as JSON."""
    max_file_bytes: int = Field(default=64 * MiB, ge=1, le=UPSTREAM_READ_CEILING)
    """Largest file read or written whole."""
    max_read_bytes: int = Field(default=256 * 1024, ge=1024)
    """Default cap on the text one read_file call returns (a continuation hint follows)."""
    exec_timeout_ms: int = Field(default=10_000, ge=1)
    max_exec_timeout_ms: int = Field(default=3_600_000, ge=1)
    output_cap_bytes: int = Field(default=1 * MiB, ge=1024)
    max_sessions: int = Field(default=64, ge=1, le=4096)
    walk_max_depth: int = Field(default=64, ge=1)
    walk_max_dirs: int = Field(default=10_000, ge=1)
    walk_max_entries: int = Field(default=50_000, ge=1)
    walk_max_response_bytes: int = Field(default=4 * MiB, ge=1024)
    walk_max_ms: int = Field(default=10_000, ge=1)
    """Time one walk may take: the tree's ignore files are agent-written, and matching each entry
    against thousands of their patterns costs milliseconds (a walk stops with ``truncated``)."""


class PluginsPolicy(_Strict):
    allow: list[str] | None = None
    """When set, only these plugins load."""
    block: list[str] = Field(default_factory=list)


class StorePolicy(_Strict):
    state_dir: str | None = None
    """Where the operation store lives; must be outside every writable root."""
    max_records: int = Field(default=10_000, ge=10)
    max_age_days: float = Field(default=30.0, gt=0)


class RuntimePolicy(_Strict):
    worker: Literal["off", "child", "daemon"] = "off"
    """Where the workspace's file operations, patches and command sessions run: "off" in the
    server process, "child" in a hardened worker the server starts (and restarts) and that dies
    with it, "daemon" in a worker started with ``codespace-worker start`` that the server attaches
    to (its sessions outlive the server)."""
    daemon_dir: str | None = None
    """Where the daemon worker keeps its socket, pid file and tokens (absolute; default
    ``<state dir>/worker``). Set it when the server runs as another user than the worker, so its
    state directory is its own: both read this from the policy. Hidden from the agent and from
    sandboxed commands, like the state directory."""
    lane_spin_us: int = Field(2000, ge=0, le=10_000)
    """How long each end of the worker's fast lane (small reads and stats) polls for the other's
    next frame before it sleeps, in microseconds; 0 sleeps at once. A process that sleeps takes
    tens of microseconds to wake (about 70 on a virtual machine without halt polling), once on
    each side of every read; polling keeps reads that follow each other closely off that path.
    It costs at most this much CPU (1 ms at most) per read in the server, waiting for an answer
    it waits for anyway, and this much in the worker once a burst of reads ends (it polls only
    while the previous read came within this window)."""

    @field_validator("daemon_dir")
    @classmethod
    def _daemon_dir(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\0" in value):
            raise ValueError(f"daemon_dir {value!r} must be an absolute path")
        return value


class Policy(_Strict):
    version: Literal[1] = 1
    filesystem: FilesystemPolicy = Field(default_factory=FilesystemPolicy)
    commands: CommandsPolicy = Field(default_factory=CommandsPolicy)
    env: EnvPolicy = Field(default_factory=EnvPolicy)
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    limits: Limits = Field(default_factory=Limits)
    plugins: PluginsPolicy = Field(default_factory=PluginsPolicy)
    store: StorePolicy = Field(default_factory=StorePolicy)
    runtime: RuntimePolicy = Field(default_factory=RuntimePolicy)


class PolicyError(Exception):
    """The policy file cannot be used; the message names file, field and problem."""


def _describe_validation_error(path: Path, err: ValidationError) -> str:
    lines = [f"policy file {path}: {err.error_count()} problem(s)"]
    for item in err.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        problem = item["msg"]
        if item["type"] == "extra_forbidden":
            problem = "unknown key (check the spelling; see the policy reference in README.md)"
        lines.append(f"  field '{field}': {problem}")
    return "\n".join(lines)


def default_policy() -> Policy:
    """``Policy()``, built without validating: every default is valid by construction (a test
    compares the two), and validation would first build the schemas of nine models, which a
    one-shot process such as the patch helper would pay at every start."""
    sections = {
        name: field.annotation.model_construct()
        for name, field in Policy.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }
    return Policy.model_construct(_fields_set=set(), **sections)


def load_policy(path: Path | None) -> Policy:
    """Read and validate a policy file; ``None`` gives the defaults."""
    if path is None:
        return default_policy()
    import tomllib  # only a policy file needs it

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"policy file {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PolicyError(f"policy file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {path}: TOML syntax error: {exc}") from exc
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_describe_validation_error(path, exc)) from exc

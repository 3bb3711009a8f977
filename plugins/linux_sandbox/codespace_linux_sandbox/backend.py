"""The Sandbox backend (server side): choose an engine, build handshake v1, wrap the spec.

Everything that can be done once is done here, in the server, and cached: the engine
probes, the ``/proc`` preflight (upstream repeats it on every run), the seccomp programs
(one per mode) and the interpreter path. ``wrap`` then only validates a small pydantic
model and returns the helper's argv with two ``inherit`` payloads: the handshake and the
BPF program.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from codespace import kernel
from codespace.contract import CommandSpec, SandboxInfo, SandboxLayout, ToolError

from . import seccomp
from .limits import cannot_enforce
from .protocol import Command, Handshake, Options, Policy

HELPER_SCRIPT = str(Path(__file__).with_name("__main__.py").resolve())
_PROC_FAILURE = ("Can't mount proc", "/newroot/proc")


@cache
def interpreter() -> str:
    """The real interpreter binary: a venv's ``python`` is a symlink, and a version
    manager's ``python3`` on PATH is a shim costing ~50 ms."""
    return os.path.realpath(sys.executable)


def helper_argv() -> list[str]:
    return [interpreter(), "-I", "-S", HELPER_SCRIPT]


@dataclass(frozen=True)
class BwrapProbe:
    path: str | None
    ok: bool
    mount_proc: bool
    detail: str


@cache
def probe_bwrap() -> BwrapProbe:
    """bubblewrap with the namespaces the engine uses, once per server (upstream's /proc
    preflight, cached): if mounting proc fails, retry without ``--proc``."""
    path = shutil.which("bwrap")
    if path is None:
        return BwrapProbe(None, False, False, "bwrap not found on PATH (apt-get install bubblewrap)")
    base = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-user", "--unshare-pid", "--unshare-ipc",
            "--unshare-net", "--cap-drop", "ALL"]
    true = shutil.which("true") or "/bin/true"
    for mount_proc in (True, False):
        argv = [*base, *(["--proc", "/proc"] if mount_proc else []), "--", true]
        try:
            run = subprocess.run(argv, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return BwrapProbe(path, False, False, f"{path} cannot run: {exc}")
        if run.returncode == 0:
            note = "" if mount_proc else " (without a fresh /proc: mounting proc failed here)"
            return BwrapProbe(path, True, mount_proc, f"{path} works with user, pid, ipc and net namespaces{note}")
        err = run.stderr.decode(errors="replace").strip()
        if not (mount_proc and all(marker in err for marker in _PROC_FAILURE)):
            return BwrapProbe(path, False, False, f"{path} cannot create the sandbox: {err[:300]}")
    return BwrapProbe(path, False, False, f"{path} cannot create the sandbox")  # pragma: no cover


@cache
def landlock_abi() -> int | None:
    probe = kernel.landlock_abi()
    return probe.value if probe.ok else None


@dataclass(frozen=True)
class EngineChoice:
    engine: str
    available: bool
    detail: str
    mount_proc: bool = True
    bwrap: str | None = None


def choose_engine(preference: str) -> EngineChoice:
    problem = seccomp.available()
    bwrap = probe_bwrap() if preference in ("auto", "bubblewrap") else None
    abi = landlock_abi()
    if bwrap is not None and bwrap.ok:
        choice = EngineChoice("bubblewrap", True, bwrap.detail, bwrap.mount_proc, bwrap.path)
    elif preference in ("auto", "landlock") and abi is not None:
        why = f"; bubblewrap unusable: {bwrap.detail}" if bwrap is not None else ""
        choice = EngineChoice("landlock", True, f"Landlock ABI {abi} with seccomp and no_new_privs{why}")
    elif preference == "landlock":
        choice = EngineChoice("landlock", False, "the kernel offers no Landlock (needs Linux >= 5.13 with lsm=landlock)")
    else:
        detail = bwrap.detail if bwrap is not None else "bubblewrap not probed"
        if preference == "auto":
            detail += "; and the kernel offers no Landlock"
        choice = EngineChoice("bubblewrap", False, detail)
    if choice.available and problem is not None:
        return EngineChoice(choice.engine, False, f"seccomp filters cannot be built: {problem}")
    return choice


def _ensure_run_dir(path: Path) -> str:
    """A private 0700 directory: an existing one must be a real directory (not a link) of
    ours, and is reset to 0700 (upstream's rule for private socket directories)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ToolError(f"sandbox run directory {path} is not a directory owned by this user", code="sandbox_setup")
    os.chmod(path, 0o700)
    return str(path)


def _check_program(spec: CommandSpec) -> None:
    """Fail like an unsandboxed exec would when the program does not exist (inside, bwrap
    would only print 'execvp: No such file')."""
    program = spec.argv[0]
    if "/" in program:
        return
    if shutil.which(program, path=spec.env.get("PATH", os.defpath)) is None:
        raise ToolError(
            f"command not found: {program!r} is not on PATH ({spec.env.get('PATH', '')}); pass the full path "
            "or run it through the shell (a string command)",
            code="command_not_found",
        )


@dataclass
class LinuxSandbox:
    """Implements :class:`codespace.contract.Sandbox` for one workspace."""

    preference: str
    state_dir: Path
    _run_dir: str | None = field(default=None, init=False)

    def choice(self) -> EngineChoice:
        return choose_engine(self.preference)

    def info(self) -> SandboxInfo:
        choice = self.choice()
        abi = landlock_abi()
        return SandboxInfo(
            engine=choice.engine,
            available=choice.available,
            landlock_abi=abi,
            cannot_enforce=cannot_enforce(choice.engine, abi, mount_proc=choice.mount_proc) if choice.available else [],
            detail=choice.detail,
        )

    def handshake(self, spec: CommandSpec, layout: SandboxLayout) -> Handshake:
        choice = self.choice()
        if not choice.available:
            raise ToolError(f"the sandbox cannot run here: {choice.detail}", code="sandbox_unavailable")
        if self._run_dir is None:
            self._run_dir = _ensure_run_dir(self.state_dir / "sandbox")
        full_write = "/" in layout.writable and not layout.deny_read and not layout.protected
        mode = seccomp.mode_for(layout.network, full_write)
        if choice.engine == "landlock" and mode == "proxy_routed":
            # No network namespace: the proxy-routed filter would let AF_INET sockets reach
            # any address (Landlock's TCP rules aside, UDP is open). Until a proxy bridge
            # exists, fail closed with the restricted filter.
            mode = "restricted"
        return Handshake(
            engine=choice.engine,
            command=Command(argv=spec.argv, cwd=spec.cwd, env=spec.env),
            policy=Policy(
                readable=layout.readable, writable=layout.writable, deny_read=layout.deny_read,
                protected=layout.protected, network=layout.network,
                proxy=None,  # the host-side bridge arrives with the proxy issue; until then 'proxy' fails closed
            ),
            options=Options(
                seccomp=mode,
                mount_proc=choice.mount_proc,
                bwrap=choice.bwrap,
                run_dir=self._run_dir,
                landlock_abi=landlock_abi(),
            ),
        )

    def wrap(self, spec: CommandSpec, layout: SandboxLayout) -> CommandSpec:
        _check_program(spec)
        hs = self.handshake(spec, layout)
        inherit = {"handshake": hs.encode()}
        if hs.options.seccomp != "none":
            inherit["seccomp"] = seccomp.program(hs.options.seccomp)
        return CommandSpec(
            argv=helper_argv(), cwd=spec.cwd, env={}, tty=spec.tty, rows=spec.rows, cols=spec.cols,
            interactive=spec.interactive, inherit=inherit,
        )

"""The Sandbox backend (server side): choose an engine, build handshake v1, start the helper.

Everything that can be done once is done in the server, and cached: the engine probes and
the ``/proc`` preflight (:mod:`.engine_choice`; upstream repeats it on every run), the
seccomp programs (one per mode) and the interpreter path. Per command it validates a small pydantic model
and then either

- ``launch`` (pipe sessions, the fast path): hands the handshake, the BPF program and the
  command's stdio to the warm helper (:mod:`.launcher`), which forks the per-command
  helper; or
- ``wrap`` (terminal sessions): returns the helper's argv with the handshake and the BPF
  program as ``inherit`` payloads, for the host to spawn.

With network ``allowlist`` it also opens the command's route to the egress proxy
(:mod:`.proxy.service`) and points the command's proxy variables at it.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import sys
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import anyio

from codespace.contract import CommandSpec, FsError, SandboxInfo, SandboxLayout, ToolError

from . import placeholders, private_tmp, run_as, seccomp
from .engines import ENGINES
from .engine_choice import (  # noqa: F401 - plugin.py and the tests import them from here
    EngineChoice,
    choose_engine,
    landlock_abi,
    may_make_pid_namespaces,
    may_make_user_namespaces,
    probe_bwrap,
)
from .launcher import Launched, Zygote, ZygoteUnavailable, helper_environment, spawn_helper
from .limits import cannot_enforce
from .protected_scan import ProtectedScan
from .protocol import Command, Handshake, Options, Policy, ProxyRoute

log = logging.getLogger(__name__)

HELPER_SCRIPT = str(Path(__file__).with_name("__main__.py").resolve())


@cache
def interpreter() -> str:
    """The real interpreter binary: a venv's ``python`` is a symlink, and a version
    manager's ``python3`` on PATH is a shim costing ~50 ms."""
    return os.path.realpath(sys.executable)


@cache
def runtime_paths() -> list[str]:
    """Where this server's Python code lives (prefixes, import path, the packages of the core and
    its plugins, editable ones included), outermost directories only."""
    from importlib.metadata import entry_points

    candidates = {sys.prefix, sys.exec_prefix, *(p for p in sys.path if os.path.isabs(p))}
    for name in {"codespace", *(ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="codespace.plugins"))}:
        module = sys.modules.get(name)
        for location in getattr(module, "__path__", ()) or ():
            candidates.add(os.path.dirname(os.path.abspath(location)))
    existing = sorted(p.rstrip("/") or "/" for p in candidates if os.path.isdir(p))
    out: list[str] = []
    for path in existing:  # sorted: a parent comes before what it contains
        if not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in out):
            out.append(path)
    return out


def helper_argv() -> list[str]:
    return [interpreter(), "-I", "-S", HELPER_SCRIPT]


ZYGOTE = Zygote(helper_argv)
"""The warm helper of this server process, shared by every workspace it serves."""

PROXY_START_WAIT_S = 5.0
SANDBOX_PROXY_PORT = 3128  # inside the sandbox's own network namespace nothing else listens
NO_PROXY = "localhost,127.0.0.1,::1"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NPM_CONFIG_PROXY", "NPM_CONFIG_HTTPS_PROXY", "YARN_HTTP_PROXY",
                    "YARN_HTTPS_PROXY", "PIP_PROXY", "BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY", "DOCKER_HTTP_PROXY",
                    "DOCKER_HTTPS_PROXY")


def proxy_environment(port: int) -> dict[str, str]:
    """The proxy variables (upstream's set, upper and lower case) for a proxy on 127.0.0.1:port."""
    http, socks = f"http://127.0.0.1:{port}", f"socks5h://127.0.0.1:{port}"
    env = {name: http for name in _PROXY_VARIABLES}
    env.update(ALL_PROXY=socks, NO_PROXY=NO_PROXY)
    return {**env, **{name.lower(): value for name, value in env.items()}}


def unix_socket_map(listed: tuple[str, ...]) -> dict[str, str]:
    """network.allow_unix_sockets as the helper's broker takes it: each listed path, and its resolved
    form, -> the resolved path (resolved here, once: the broker then follows no symbolic link)."""
    out: dict[str, str] = {}
    for entry in listed:
        path = os.path.expanduser(entry)
        resolved = os.path.realpath(path)
        out[path] = out[resolved] = resolved
    return out


def _ensure_run_dir(path: Path) -> str:
    """A private 0700 directory: an existing one must be a real directory (not a link) of
    ours, and is reset to 0700 (upstream's rule for private socket directories)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ToolError(f"sandbox run directory {path} is not a directory owned by this user", code="sandbox_setup")
    os.chmod(path, 0o700)
    return str(path)


def _remove_all(directories: list[tuple[str, int]]) -> None:
    for path, fd in directories:
        private_tmp.remove(path, fd)


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
    proxy: Any = None
    """The workspace's :class:`.proxy.ProxyService` once :meth:`egress_proxy` made it."""
    network: Any = None
    """The workspace's ``[network]`` policy section: the allowlist its egress proxy enforces."""
    zygote: Zygote = field(default=ZYGOTE)
    root: Path | None = None
    """The workspace root: its owner decides who commands run as when the server is root."""
    run_as_uid: int = 65534
    run_as_gid: int = 65534
    max_processes: int = 4096
    """[sandbox] max_processes (0: none)."""
    allow_unix_sockets: tuple[str, ...] = ()
    """network.allow_unix_sockets: reached through the helper's connect broker (:mod:`.unix_broker`)."""
    _run_dir: str | None = field(default=None, init=False)
    _protected: ProtectedScan = field(default_factory=ProtectedScan, init=False)

    @classmethod
    def for_workspace(cls, workspace: Any) -> LinuxSandbox:
        sandbox = workspace.policy.sandbox
        return cls(preference=sandbox.engine, state_dir=workspace.state_dir, root=Path(workspace.root),
                   run_as_uid=sandbox.run_as_uid, run_as_gid=sandbox.run_as_gid, max_processes=sandbox.max_processes,
                   allow_unix_sockets=tuple(workspace.policy.network.allow_unix_sockets),
                   network=workspace.policy.network)

    def egress_proxy(self, audit: Any) -> Any:
        """This workspace's egress proxy (network access 'allowlist'), made once; its decisions go
        to ``audit`` (:class:`codespace.contract.NetworkAudit`). Run it as a service."""
        if self.proxy is None:
            from .proxy import ProxyService
            from .proxy.service import rules_from_policy

            self.proxy = ProxyService(rules_from_policy(self.network), audit, self.state_dir,
                                      udp=self.network.enable_socks5_udp)
        return self.proxy

    def run_as(self):
        """The command's host ids (:class:`.protocol.RunAs`), or None when the server is not root."""
        return run_as.choose(self.root, self.run_as_uid, self.run_as_gid)

    def choice(self) -> EngineChoice:
        return choose_engine(self.preference)

    def info(self) -> SandboxInfo:
        choice = self.choice()
        abi = landlock_abi()
        identity = self.run_as()
        detail = choice.detail
        if choice.available:
            detail += "; " + self.fast_path_status() + "; " + run_as.summary(identity, self.root)[1]
        return SandboxInfo(
            engine=choice.engine,
            available=choice.available,
            landlock_abi=abi,
            cannot_enforce=[*cannot_enforce(choice.engine, abi, mount_proc=choice.mount_proc,
                                            pid_namespace=may_make_pid_namespaces(),
                                            unix_sockets=self.allow_unix_sockets,
                                            walk_cut=self._protected.truncated(),
                                            max_processes=self.max_processes,
                                            user_namespaces=may_make_user_namespaces(),
                                            protected_by_mounts=run_as.mounts_possible(identity),
                                            read_only_view=bool(identity and identity.idmap)),
                            *run_as.cannot_enforce(identity, self.root, choice.engine)]
            if choice.available else [],
            detail=detail,
            engines=sorted(ENGINES),
        )

    def command_ended(self) -> None:
        """The host: a command this sandbox confined has ended, however it ended. Placeholders
        (see :mod:`.placeholders`) that no running command needs are removed now, and the
        private TMPDIRs of helpers that were killed (:mod:`.private_tmp`), in a thread: what a
        command wrote there may take a while to remove."""
        if self._run_dir is None:
            return
        placeholders.sweep(self._run_dir)
        if leftovers := private_tmp.stale(self._run_dir):
            threading.Thread(target=_remove_all, args=(leftovers,), name="codespace-tmp-sweep", daemon=True).start()

    def walk_protected(self, layout: SandboxLayout) -> None:
        """At start: the first walk for protected names below each writable root (protected_scan)."""
        self._protected.below(layout.writable, layout.protected_names, layout.deny_read, wait=True)

    def sweep_leftovers(self) -> bool:
        """What helpers of a server that was killed left (at start): placeholders, private TMPDIRs;
        True once nothing is left."""
        run_dir = self.state_dir / "sandbox"
        _remove_all(private_tmp.stale(str(run_dir)))
        return not run_dir.is_dir() or placeholders.sweep(str(run_dir))

    def fast_path_status(self) -> str:
        if self.zygote.pid is not None:
            return f"fast path: commands fork from the warm helper (pid {self.zygote.pid})"
        if self.zygote.problem:
            return f"fast path unavailable ({self.zygote.problem}): each command starts a helper of its own"
        return "fast path: the warm helper starts with the first command"

    def handshake(self, spec: CommandSpec, layout: SandboxLayout, route: Any = None) -> Handshake:
        """Handshake v1 for ``spec``; ``route`` is the command's proxy route (see :meth:`open_route`)."""
        choice = self.choice()
        if not choice.available:
            raise ToolError(f"the sandbox cannot run here: {choice.detail}", code="sandbox_unavailable")
        if self._run_dir is None:
            self._run_dir = _ensure_run_dir(self.state_dir / "sandbox")
        full_write = "/" in layout.writable and not layout.deny_read and not layout.protected
        mode = seccomp.mode_for(layout.network, full_write)
        env, proxy = spec.env, None
        if mode == "proxy_routed" and choice.engine == "landlock":
            # No network namespace: only TCP to this command's proxy port (Landlock) and no
            # other kind of socket (seccomp). Without a route, no network at all.
            mode = "proxy_tcp" if route is not None else "restricted"
        sockets = unix_socket_map(self.allow_unix_sockets) if mode == "restricted" and layout.network == "off" else {}
        if sockets:
            mode = "restricted_unix"  # connect() goes to the helper's broker (unix_broker.py)
        if route is not None:
            port = route.port if choice.engine == "landlock" else SANDBOX_PROXY_PORT
            proxy = ProxyRoute(socket=route.path, port=port)
            env = {**spec.env, **proxy_environment(port)}
        return Handshake(
            engine=choice.engine,
            command=Command(argv=spec.argv, cwd=spec.cwd, env=env),
            policy=Policy(
                readable=layout.readable, writable=layout.writable, deny_read=layout.deny_read,
                # and the protected names found below each writable root's top (protected_scan)
                protected=[*layout.protected, *self._protected.below(layout.writable, layout.protected_names,
                                                                     layout.deny_read)],
                network=layout.network, proxy=proxy, allow_unix_sockets=sockets,
            ),
            options=Options(
                seccomp=mode,
                mount_proc=choice.mount_proc,
                bwrap=choice.bwrap,
                run_dir=self._run_dir,
                landlock_abi=landlock_abi(),
                runtime=runtime_paths(),
                run_as=self.run_as(),
                max_processes=self._process_limit(choice.engine),
            ),
        )

    def _process_limit(self, engine: str) -> int | None:
        """[sandbox] max_processes for the helper to enforce, or None: the Landlock engine's
        limit needs a user namespace per command (``cannot_enforce`` names it otherwise)."""
        if not self.max_processes or (engine == "landlock" and not may_make_user_namespaces()):
            return None
        return self.max_processes

    @staticmethod
    def _userns(hs: Handshake) -> int | None:
        """The id mapping's user namespace for the warm helper's child (made once; a helper started
        alone makes its own)."""
        ids = hs.options.run_as
        if ids is None or not ids.idmap:
            return None
        try:
            return run_as.userns_fd(ids.uid, ids.gid)
        except OSError as exc:
            log.warning("sandbox: no user namespace for the id mapping (%s); the helper makes its own", exc)
            return None

    def open_route(self, spec: CommandSpec, layout: SandboxLayout) -> Any:
        """This command's route to the egress proxy, or None (no proxy needed, or none running:
        then the command gets no network at all)."""
        if layout.network != "proxy" or self.proxy is None or not self.proxy.running:
            return None
        engine = self.choice().engine
        if engine == "landlock" and (landlock_abi() or 0) < 4:
            return None  # no TCP rules to confine connects to the proxy's port: fail closed
        return self.proxy.open_route(spec.operation_id, tcp=engine == "landlock")

    def _release_route(self, route: Any) -> None:
        if route is not None and self.proxy is not None:
            self.proxy.release(route.path)

    def wrap(self, spec: CommandSpec, layout: SandboxLayout) -> CommandSpec:
        """The slow path (terminal sessions): the host spawns the helper with the payloads. A
        route is released when the helper's registration ends (or unused, after a timeout)."""
        _check_program(spec)
        route = self.open_route(spec, layout)
        try:
            hs = self.handshake(spec, layout, route)
        except BaseException:
            self._release_route(route)
            raise
        inherit = {"handshake": hs.encode()}
        if hs.options.seccomp != "none":
            inherit["seccomp"] = seccomp.program(hs.options.seccomp)
        return CommandSpec(
            argv=helper_argv(), cwd=spec.cwd, env=helper_environment(), tty=spec.tty, rows=spec.rows, cols=spec.cols,
            interactive=spec.interactive, inherit=inherit,
        )

    async def launch(self, spec: CommandSpec, layout: SandboxLayout, stdio: tuple[int, int, int]) -> Launched:
        """The fast path (pipe sessions): see :meth:`launch_now`."""
        if layout.network == "proxy" and self.proxy is not None and not self.proxy.running:
            with anyio.move_on_after(PROXY_START_WAIT_S):  # a command that arrives with the server
                await self.proxy.wait_started()
        return self.launch_now(spec, layout, stdio)

    def launch_now(self, spec: CommandSpec, layout: SandboxLayout, stdio: tuple[int, int, int]) -> Launched:
        """Start ``spec`` confined, on ``stdio``: a per-command helper forked by the warm helper
        (or started alone when that cannot serve). Blocks for one round trip (a fork)."""
        if not os.path.isdir(spec.cwd):  # as an unsandboxed exec would fail, and with its words
            missing = not os.path.lexists(spec.cwd)
            raise FsError(f"cannot run in {spec.cwd}: {'the directory does not exist' if missing else 'it is not a directory'}"
                          ". To proceed: pass a directory of the workspace as cwd.",
                          path=spec.cwd, errno=errno.ENOENT if missing else errno.ENOTDIR)
        _check_program(spec)
        route = self.open_route(spec, layout)
        payloads: list[int] = []
        try:
            hs = self.handshake(spec, layout, route)
            payloads.append(_memfd("codespace-handshake", hs.encode()))
            if hs.options.seccomp != "none":
                payloads.append(_memfd("codespace-seccomp", seccomp.program(hs.options.seccomp)))
            fds = [*stdio, *payloads]
            popen = None
            try:
                pid = self.zygote.request(fds, self._userns(hs))
            except ZygoteUnavailable as exc:
                log.debug("sandbox fast path unavailable: %s", exc)
                try:
                    popen = spawn_helper(helper_argv(), fds, spec.cwd)
                except OSError as spawn_exc:
                    raise ToolError(f"cannot start the sandbox helper: {spawn_exc}", code="spawn_failed") from spawn_exc
                pid = popen.pid
            return Launched(pid, (lambda: self._release_route(route)) if route is not None else None, popen)
        except BaseException:
            self._release_route(route)
            raise
        finally:
            for fd in payloads:
                os.close(fd)


def _memfd(name: str, data: bytes) -> int:
    """A payload the helper reads to its end (bwrap reads the seccomp program the same way)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd

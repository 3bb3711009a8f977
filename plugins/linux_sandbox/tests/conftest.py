from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from codespace_linux_sandbox import pin_sides
from codespace_linux_sandbox.backend import LinuxSandbox, choose_engine, interpreter

from codespace.contract import CommandSpec
from codespace.sandboxing import layout_for
from codespace.testing import open_workspace
from codespace.workspace import Workspace

TESTS = Path(__file__).parent
PROBE = Path(pin_sides.PROBE)  # the pin check runs the same probe
ENGINES = ("bubblewrap", "landlock")
STARTS = ("wrap", "launch")  # a helper spawned per command / forked by the warm helper (the fast path)
READ_ONLY = '[filesystem.paths]\n"." = "read"\n'
WORKSPACE_WRITE = ""  # CodeSpace's default policy: the workspace is writable


def require_engine(engine: str) -> None:
    choice = choose_engine(engine)
    if not choice.available or choice.engine != engine:
        pytest.skip(f"the {engine} engine does not work here: {choice.detail}")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    require_engine(request.param)
    return request.param


def _base_dir() -> str:
    # Outside /tmp: the bubblewrap engine gives commands a private /tmp, so a sibling of the
    # workspace under /tmp would not exist inside at all (and codex binds the host's /tmp).
    for candidate in ("/var/tmp", os.path.expanduser("~/.cache")):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK):
            return candidate
    return tempfile.gettempdir()


@pytest.fixture
def base() -> Path:
    path = Path(tempfile.mkdtemp(prefix="codespace-sandbox-test-", dir=_base_dir()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# ws, state, make_app, ... come from codespace.testing, a pytest plugin; here they live in base.
@pytest.fixture
def workspace_parent(base: Path) -> Path:
    return base


@pytest.fixture
def enabled_plugins() -> tuple[str, ...]:
    return ("linux_sandbox",)


class Launch:
    """The part of subprocess.Popen the tests use, over ``LinuxSandbox.launch_now`` (the fast
    path): the command's pipes are made here, as the host's PipeProcess.launch makes them."""

    def __init__(self, sandbox: LinuxSandbox, command: CommandSpec, layout, *, stdin=subprocess.DEVNULL,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> None:
        ends, self._child_ends = [], []
        for stream, file_mode in ((stdin, "wb"), (stdout, "rb"), (stderr, "rb")):
            if stream == subprocess.PIPE:
                r, w = os.pipe()
                ours, theirs = (w, r) if file_mode == "wb" else (r, w)
                ends.append(open(ours, file_mode, buffering=0))  # noqa: SIM115 - closed by communicate
                self._child_ends.append(theirs)
            elif stream == subprocess.DEVNULL:
                ends.append(None)
                self._child_ends.append(os.open(os.devnull, os.O_RDWR))
            else:
                ends.append(None)
                self._child_ends.append(os.dup(stream))
        self.stdin, self.stdout, self.stderr = ends
        try:
            self._launched = sandbox.launch_now(command, layout, tuple(self._child_ends))
        finally:
            for fd in self._child_ends:
                os.close(fd)
        assert self._launched.forked, f"the fast path fell back: {sandbox.zygote.problem}"
        self.pid = self._launched.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self._launched.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]:
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        out = {self.stdout: b"", self.stderr: b""}
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    selector.register(stream, selectors.EVENT_READ)
            while selector.get_map():
                if deadline is not None and time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(str(self.pid), timeout)
                for key, _ in selector.select(0.1):
                    try:
                        chunk = os.read(key.fileobj.fileno(), 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        out[key.fileobj] += chunk
                    else:
                        selector.unregister(key.fileobj)
                        key.fileobj.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out[self.stdout] if self.stdout else None, out[self.stderr] if self.stderr else None


@dataclass
class Env:
    base: Path
    ws: Path
    outside: Path
    workspace: Workspace
    sandbox: LinuxSandbox
    start: str = "wrap"

    def command(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> CommandSpec:
        command_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.base / "home")}
        command_env.update(env or {})
        return CommandSpec(argv=argv, cwd=cwd or str(self.ws), env=command_env)

    def spec(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> CommandSpec:
        return self.sandbox.wrap(self.command(argv, env, cwd), layout_for(self.workspace))

    def popen(self, argv: list[str], *, env: dict[str, str] | None = None, wrapper: tuple[str, ...] = (),
              **kwargs: object):
        """Start the helper the way the host does: own session, payloads on inherited pipes
        (``wrap``, the helper run under ``wrapper`` if given), or through the fast path (``launch``)."""
        if self.start == "launch":
            assert not wrapper, "a helper forked by the warm helper runs under no wrapper"
            kwargs.pop("start_new_session", None)
            if "preexec_fn" in kwargs:
                pytest.skip("a helper forked by the warm helper cannot run a preexec_fn (terminals use wrap)")
            return Launch(self.sandbox, self.command(argv, env), layout_for(self.workspace), **kwargs)
        spec = self.spec(argv, env)
        child_env = dict(spec.env)
        fds = []
        writers = []
        for name, payload in spec.inherit.items():
            r, w = os.pipe()
            child_env[f"CODESPACE_FD_{name.upper()}"] = str(r)
            fds.append(r)
            writers.append((w, payload))
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen([*wrapper, *spec.argv], cwd=spec.cwd, env=child_env, pass_fds=fds, **kwargs)
        for r in fds:
            os.close(r)
        for w, payload in writers:
            os.write(w, payload)
            os.close(w)
        return proc

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, str]:
        proc = self.popen(argv, env=env)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def probe(self) -> dict[str, str]:
        code, out, err = self.run([interpreter(), "-I", "-S", str(PROBE), str(self.outside)])
        assert code == 0, f"probe failed ({code}): {err}"
        return json.loads(out)


def make_env(base: Path, engine: str, policy: str = WORKSPACE_WRITE, start: str = "wrap") -> Env:
    ws = base / "ws"
    ws.mkdir(exist_ok=True)
    (ws / ".git").mkdir(exist_ok=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "sub").mkdir(exist_ok=True)
    (base / "outside").mkdir(exist_ok=True)
    (base / "home").mkdir(exist_ok=True)
    workspace = open_workspace(ws, state_dir=base / "state", policy=policy + f'\n[sandbox]\nengine = "{engine}"\n')
    workspace.ensure_state_dir()
    return Env(base, ws, base / "outside", workspace, LinuxSandbox.for_workspace(workspace), start)


@pytest.fixture(params=STARTS)
def start(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def sandbox_env(base: Path, engine: str, start: str) -> Env:
    return make_env(base, engine, start=start)


def pipe_holders(stream) -> list[str]:  # noqa: ANN001 - a pipe's file object
    """Who holds the other end of ``stream``'s pipe: one line per process (pid, parent,
    state, namespace pids, command line), for a test's message when a pipe stays open."""
    wanted = f"pipe:[{os.fstat(stream.fileno()).st_ino}]"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            links = {os.readlink(f"/proc/{entry}/fd/{fd}") for fd in os.listdir(f"/proc/{entry}/fd")}
            if wanted not in links:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        except OSError:
            continue
        found.append(f"pid {entry} ppid {status.get('PPid')} state {status.get('State')} "
                     f"nspid {status.get('NSpid')} sid {status.get('NSsid')}: {cmdline}")
    return found


def live_pids_in(paths: list[str]) -> list[int]:
    """Processes whose command line mentions one of ``paths`` (to prove nothing survived)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and any(p in cmdline for p in paths):
            found.append(int(entry))
    return found


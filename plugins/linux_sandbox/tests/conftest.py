from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from codespace_linux_sandbox.backend import LinuxSandbox, choose_engine, interpreter

from codespace.contract import CommandSpec
from codespace.sandboxing import layout_for
from codespace.testing import MODES
from codespace.workspace import Workspace

TESTS = Path(__file__).parent
PROBE = TESTS / "probe.py"
ENGINES = ("bubblewrap", "landlock")
READ_ONLY = '[filesystem.paths]\n"." = "read"\n'
WORKSPACE_WRITE = ""  # CodeSpace's default policy: the workspace is writable


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


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


@dataclass
class Env:
    base: Path
    ws: Path
    outside: Path
    workspace: Workspace
    sandbox: LinuxSandbox

    def spec(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> CommandSpec:
        command_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.base / "home")}
        command_env.update(env or {})
        return self.sandbox.wrap(CommandSpec(argv=argv, cwd=cwd or str(self.ws), env=command_env),
                                 layout_for(self.workspace))

    def popen(self, argv: list[str], *, env: dict[str, str] | None = None, **kwargs: object) -> subprocess.Popen:
        """Start the helper the way the host does: own session, payloads on inherited pipes."""
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
        proc = subprocess.Popen(spec.argv, cwd=spec.cwd, env=child_env, pass_fds=fds, **kwargs)
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


def make_env(base: Path, engine: str, policy: str = WORKSPACE_WRITE) -> Env:
    ws = base / "ws"
    ws.mkdir(exist_ok=True)
    (ws / ".git").mkdir(exist_ok=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "sub").mkdir(exist_ok=True)
    (base / "outside").mkdir(exist_ok=True)
    (base / "home").mkdir(exist_ok=True)
    policy_path = base / "policy.toml"
    policy_path.write_text(policy + f'\n[sandbox]\nengine = "{engine}"\n')
    workspace = Workspace.open(ws, policy_path=policy_path, state_dir=base / "state")
    workspace.ensure_state_dir()
    return Env(base, ws, base / "outside", workspace, LinuxSandbox(engine, workspace.state_dir))


@pytest.fixture
def sandbox_env(base: Path, engine: str) -> Env:
    return make_env(base, engine)


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

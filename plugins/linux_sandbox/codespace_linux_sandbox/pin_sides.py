"""The two sides of the pin check: a command run under ours (the helper, as the host spawns it for a
terminal session) and under upstream's ``codex sandbox``, on the same kind of workspace.

A workspace here is a directory tree below ``/var/tmp`` (``codex sandbox`` started under ``/tmp``
fails: it refuses to make its helper links there, and our bubblewrap engine hides the host's ``/tmp``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codespace.contract import CommandSpec, PathRules, Policy, SandboxLayout

from .backend import LinuxSandbox, interpreter

PROBE = Path(__file__).with_name("pin_probe.py")
POLICIES = ("read-only", "workspace-write")
RUN_TIMEOUT_S = 120
_PATH = "/usr/local/bin:/usr/bin:/bin"


def base_dir() -> str:
    """Where the check's workspaces go: not ``/tmp`` (see the module's docstring)."""
    for candidate in ("/var/tmp", os.path.expanduser("~/.cache")):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK):
            return candidate
    return tempfile.gettempdir()


@dataclass
class Tree:
    """One side's workspace: ``ws`` (with ``.git`` and ``sub``), a directory ``outside`` it, an empty
    ``home`` (so the default policy's credential paths all lie in it and none exists) and ``state``."""

    base: Path

    @property
    def ws(self) -> Path:
        return self.base / "ws"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @classmethod
    def make(cls, parent: Path, name: str) -> Tree:
        tree = cls(parent / name)
        for path in (tree.ws / ".git", tree.ws / "sub", tree.outside, tree.home):
            path.mkdir(parents=True, exist_ok=True)
        (tree.ws / ".git" / "config").write_text("[core]\n")
        return tree


def layout(tree: Tree, policy: str) -> SandboxLayout:
    """CodeSpace's default policy (``workspace-write``), or it with ``"." = "read"`` (``read-only``),
    as the core hands it to a sandbox for this tree (tests/test_pin_check.py holds it to the core's own
    derivation). The home directory is the tree's empty one: credential masks would depend on the host."""
    overrides = {"filesystem": {"paths": {".": "read"}}} if policy == "read-only" else {}
    fs = Policy.model_validate(overrides).filesystem
    rules = PathRules.build(fs, tree.ws, str(tree.home))
    readable = [r.path for r in rules.rules if r.access in ("read", "write")]
    writable = sorted((r.path for r in rules.rules if r.access == "write"), key=lambda p: p.count("/"))
    protected = [os.path.join(root, *entry) for root in writable for entry in rules.protected_anchored]
    protected += [os.path.join(root, name) for root in writable for name in sorted(rules.protected_names)]
    protected += [r.path for r in rules.rules
                  if r.access == "read" and any(r.path.startswith(w + "/") for w in writable)]
    deny = [r.path for r in rules.rules if r.access == "none"] + [str(tree.state)]
    return SandboxLayout(readable=readable, writable=writable, deny_read=deny, protected=sorted(set(protected)),
                         protected_names=sorted(rules.protected_names), network="off")


def ours(tree: Tree, engine: str, policy: str, argv: list[str], wrapper: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run ``argv`` in ``tree.ws`` through our helper (``engine``), under ``wrapper`` (e.g. strace) if given."""
    sandbox = LinuxSandbox(preference=engine, state_dir=tree.state, root=tree.ws)
    tree.state.mkdir(mode=0o700, exist_ok=True)
    command = CommandSpec(argv=argv, cwd=str(tree.ws), env={"PATH": _PATH, "HOME": str(tree.home)})
    spec = sandbox.wrap(command, layout(tree, policy))
    env, fds, writers = dict(spec.env), [], []
    for name, payload in spec.inherit.items():
        r, w = os.pipe()
        env[f"CODESPACE_FD_{name.upper()}"] = str(r)
        fds.append(r)
        writers.append((w, payload))
    try:
        proc = subprocess.Popen([*wrapper, *spec.argv], cwd=spec.cwd, env=env, pass_fds=fds, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    finally:
        for r in fds:
            os.close(r)
    for w, payload in writers:  # a payload larger than a pipe's buffer needs the reader running
        os.write(w, payload)
        os.close(w)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        sandbox.command_ended()
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def upstream(codex: Path, tree: Tree, policy: str, argv: list[str], wrapper: tuple[str, ...] = (),
             flags: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run ``argv`` in ``tree.ws`` under ``codex sandbox`` (its default policy is read-only)."""
    codex_home = tree.base / "codex-home"
    codex_home.mkdir(exist_ok=True)
    extra = ["-c", 'sandbox_mode="workspace-write"'] if policy == "workspace-write" else []
    done = subprocess.run([*wrapper, str(codex), "sandbox", *extra, *flags, "--", *argv], cwd=tree.ws,
                          env={"HOME": str(codex_home), "PATH": _PATH}, capture_output=True, timeout=RUN_TIMEOUT_S,
                          check=False)
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def probe_argv(tree: Tree) -> list[str]:
    return [interpreter(), "-I", "-S", str(PROBE), str(tree.outside)]


def parse_probe(side: str, result: tuple[int, str, str]) -> dict[str, str]:
    """The probe's table, or a RuntimeError naming the side, its exit status and its last words."""
    code, out, err = result
    if code != 0:
        raise RuntimeError(f"{side}: the probe exited {code}: {err.strip()[-400:]}")
    try:
        return json.loads(out)
    except ValueError as exc:
        raise RuntimeError(f"{side}: the probe printed no JSON table ({exc}): {out[-200:]!r}") from exc


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="codespace-pin-check-", dir=base_dir()))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

"""codex-process-hardening against our worker's: what a running process shows, and the exit codes.

Upstream applies the hardening in its voice helper (``codex-voice-host``, shipped in the npm
package beside ``codex``); the ``codex`` CLI and ``codex-code-mode-host`` do not (as observed at
rust-v0.171.0). Each is started with ``LD_*`` set, as an unprivileged uid, and read through
``/proc/<pid>``: a non-dumpable process's entries belong to root, ``limits`` shows the core limit,
``environ`` the block the process started with. Then the helper and our worker
(``codespace-worker serve --no-runner``) are started under :mod:`.pin_deny`, which makes one step
fail, and their exit statuses are compared (upstream: 5 and 7).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

VENDOR = "package/vendor/x86_64-unknown-linux-musl"
VOICE = f"{VENDOR}/codex-resources/voice"
EXECUTABLES = {
    "codex": (f"{VENDOR}/bin/codex", ["app-server"]),
    "codex-code-mode-host": (f"{VENDOR}/bin/codex-code-mode-host", []),
    "codex-voice-host": (f"{VOICE}/bin/codex-voice-host", []),
}
"""Every long-running executable of the package: its member and the arguments that keep it serving
on stdin (so it lives long enough to be read)."""
UNPRIVILEGED_UID = 1000
SETTLE_S = 1.0
READY_TIMEOUT_S = 20.0
LD_MARK = "LD_CODESPACE_PIN_CHECK"


class Unavailable(Exception):
    """This part cannot be compared here; the message says why."""


@dataclass(frozen=True)
class Effects:
    dumpable: bool
    core: str
    """``soft hard`` of RLIMIT_CORE, as /proc/<pid>/limits prints them."""
    ld_in_environ: bool

    def as_row(self) -> dict[str, str]:
        return {"dumpable": "yes" if self.dumpable else "no", "core limit": self.core,
                "LD_* in /proc/<pid>/environ": "yes" if self.ld_in_environ else "no"}


def run_uid() -> int:
    """The uid the processes run as: an unprivileged one, so that dumpable is visible."""
    if os.geteuid() != 0:
        return os.geteuid()
    if shutil.which("setpriv") is None:
        raise Unavailable("running as root without setpriv: a process's dumpable flag cannot be seen "
                          "(as root every /proc entry is root's anyway)")
    return UNPRIVILEGED_UID


def as_uid(uid: int, argv: list[str]) -> list[str]:
    if uid == os.geteuid():
        return argv
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


def helpers(codex: Path) -> Path:
    """The package's other executables and the voice libraries, extracted once from the release's
    tarball beside its cached ``codex`` (``codex_binary`` keeps the tarball)."""
    cache = codex.parents[4]
    done = cache / "helpers" / ".complete"
    if done.exists():
        return cache / "helpers"
    tarballs = sorted(cache.glob("*.tgz"))
    if not tarballs:
        raise Unavailable(f"no release tarball in {cache}: the helpers cannot be extracted")
    with tarfile.open(tarballs[-1]) as archive:
        wanted = [m for m in archive.getmembers()
                  if m.name.startswith(VOICE + "/") or m.name == EXECUTABLES["codex-code-mode-host"][0]]
        archive.extractall(cache / "helpers", members=wanted, filter="data")
    done.write_text("")
    return cache / "helpers"


def stage(codex: Path, base: Path, uid: int) -> dict[str, Path]:
    """Each executable where ``uid`` can run it: hard links (or copies) in ``base`` (the cache may
    sit in a home only its owner can enter)."""
    root = helpers(codex)
    staged: dict[str, Path] = {}
    for name, (member, _args) in EXECUTABLES.items():
        source = codex if name == "codex" else root / member
        target = base / "bin" / member
        if name == "codex-voice-host":
            shutil.copytree(root / VOICE / "lib", base / "bin" / VOICE / "lib", dirs_exist_ok=True,
                            copy_function=_link_or_copy)
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(str(source), str(target))
        staged[name] = target
    _open_to(base, uid)
    return staged


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    os.chmod(target, 0o755)


def _open_to(base: Path, uid: int) -> None:
    for directory, _dirs, _files in os.walk(base):
        os.chmod(directory, 0o755)
    if uid != os.geteuid():
        os.chown(base, uid, uid)


def voice_env(staged: dict[str, Path]) -> dict[str, str]:
    """How the voice host finds its libraries (codex starts it with them on LD_LIBRARY_PATH)."""
    lib = staged["codex-voice-host"].parents[1] / "lib"
    return {"LD_LIBRARY_PATH": str(lib)}


def read_effects(pid: int, uid: int) -> Effects:
    owner = os.stat(f"/proc/{pid}/fd").st_uid
    limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
    core = next(line for line in limits if line.startswith("Max core file size")).split()[4:6]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return Effects(dumpable=owner == uid, core=" ".join(core),
                   ld_in_environ=any(v.startswith(LD_MARK.encode()) for v in environ))


def observe(argv: list[str], env: dict[str, str], uid: int, home: Path, ready: Path | None = None) -> Effects:
    """Start ``argv`` as ``uid``, wait until ``ready`` exists (else let it settle), read its /proc
    entries, stop it. ``LD_*`` is set (``LD_MARK``), to see whether it stays in the process's
    start-up block."""
    full_env = {"HOME": str(home), "PATH": "/usr/bin:/bin", LD_MARK: "1", **env}
    proc = subprocess.Popen(as_uid(uid, argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=full_env)
    try:
        deadline = time.monotonic() + (READY_TIMEOUT_S if ready is not None else SETTLE_S)
        while time.monotonic() < deadline and proc.poll() is None:
            if ready is not None and ready.exists():
                break
            time.sleep(0.05)
        if ready is not None and proc.poll() is None and not ready.exists():
            raise RuntimeError(f"{' '.join(argv[:4])} did not create {ready.name} in {READY_TIMEOUT_S:.0f} s")
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip()
            raise RuntimeError(f"{Path(argv[0]).name} exited {proc.returncode} before it could be read: {err[-300:]}")
        return read_effects(proc.pid, uid)
    finally:
        stop_process(proc)


def exit_status(argv: list[str], env: dict[str, str], uid: int, home: Path, step: str,
                timeout: float = 30.0) -> tuple[int | None, str]:
    """Run ``argv`` under :mod:`.pin_deny` ``step``: (exit status, or None if it kept running; last line of stderr)."""
    deny = [sys.executable, "-I", "-S", str(Path(__file__).with_name("pin_deny.py")), step, "--"]
    full_env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **env}
    proc = subprocess.Popen(as_uid(uid, deny + argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=full_env)
    try:
        _out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        return None, ""
    lines = err.decode(errors="replace").strip().splitlines()
    return proc.returncode, (lines[-1] if lines else "")


def stop_process(proc: subprocess.Popen) -> None:
    """End an oracle process of the check: SIGTERM, SIGKILL after 10 s; its pipes drained."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


@dataclass
class OurWorker:
    """The files ``codespace-worker serve --no-runner --socket`` needs, owned by ``uid``."""

    argv: list[str]
    env: dict[str, str]

    @classmethod
    def make(cls, base: Path, uid: int) -> OurWorker:
        root = base / f"worker-{uid}"
        for sub in ("ws", "sock", "state"):
            (root / sub).mkdir(parents=True, mode=0o700)
        token = root / "token"
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.close(fd)
        for path in (root, root / "ws", root / "sock", root / "state", token):
            if uid != os.geteuid():
                os.chown(path, uid, uid)
        argv = [sys.executable, "-m", "codespace_runtime.cli", "serve", "--workspace", str(root / "ws"),
                "--socket", str(root / "sock" / "worker.sock"), "--token-file", str(token), "--no-runner"]
        return cls(argv, {"CODESPACE_STATE_DIR": str(root / "state")})

    @property
    def socket(self) -> Path:
        return Path(self.argv[self.argv.index("--socket") + 1])

    def reset(self) -> None:
        """Remove what a previous run left in the socket directory (a run stopped by a signal)."""
        for leftover in self.socket.parent.iterdir():
            leftover.unlink()

"""codex-uds against :mod:`.sockets` on the same prepared paths.

Upstream's listening side is reached through ``codex app-server --listen unix://PATH`` (the
control socket, which goes through ``codex-uds``); ours through :func:`.sockets.socket_dir` and
:func:`.sockets.bind_listener`, as the daemon worker places its socket. Each case prepares the
socket's directory ``D`` and path ``D/app.sock`` the same way for both sides, starts the listener
and records an :class:`Outcome`: serving or refused, what ``D`` is then, and whether what was
prepared at the path survived a refusal.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import sockets
from .pin_hardening import stop_process

SOCKET = "app.sock"
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Outcome:
    verdict: str
    """``serving`` or ``refused``."""
    directory: str
    """What the socket directory is while serving (or after the refusal): ``dir 0700``, ``link``, ..."""
    left_alone: str = ""
    """For a refusal over something prepared at the path: whether it is intact."""
    placement: str = ""
    """Where the listening socket really is (serving only)."""
    message: str = ""

    def compared(self) -> str:
        parts = [self.verdict, self.directory] + ([self.left_alone] if self.left_alone else [])
        return "; ".join(parts)


@dataclass
class Prepared:
    directory: Path
    path: Path
    listener: socket.socket | None = None
    content: bytes | None = None

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()


def _absent(p: Prepared) -> None:
    pass


def _mode(mode: int) -> Callable[[Prepared], None]:
    def prepare(p: Prepared) -> None:
        os.mkdir(p.directory)
        os.chmod(p.directory, mode)
    return prepare


def _linked(p: Prepared) -> None:
    real = p.directory.with_name(p.directory.name + ".real")
    os.mkdir(real, 0o700)
    os.symlink(real, p.directory)


def _file_as_dir(p: Prepared) -> None:
    p.directory.write_bytes(b"not a directory\n")
    p.content = p.directory.read_bytes()


def _stale(p: Prepared) -> None:
    os.mkdir(p.directory, 0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(p.path))
    dead.close()  # the path stays: a socket nobody listens on


def _live(p: Prepared) -> None:
    os.mkdir(p.directory, 0o700)
    p.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    p.listener.bind(str(p.path))
    p.listener.listen(8)


def _regular(p: Prepared) -> None:
    os.mkdir(p.directory, 0o700)
    p.path.write_bytes(b"somebody's file\n")
    p.content = p.path.read_bytes()


def _dangling(p: Prepared) -> None:
    os.mkdir(p.directory, 0o700)
    os.symlink("/nonexistent-codespace-pin-check", p.path)


CASES: dict[str, Callable[[Prepared], None]] = {
    "directory absent": _absent,
    "directory 0700": _mode(0o700),
    "directory 0755": _mode(0o755),
    "directory 0777": _mode(0o777),
    "directory a symlink to a 0700 directory": _linked,
    "directory a regular file": _file_as_dir,
    "stale socket at the path": _stale,
    "live socket at the path": _live,
    "regular file at the path": _regular,
    "dangling symlink at the path": _dangling,
}


def describe_dir(path: Path) -> str:
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "dir missing"
    if stat.S_ISLNK(info.st_mode):
        return "link"
    if stat.S_ISDIR(info.st_mode):
        return f"dir {stat.S_IMODE(info.st_mode):04o}"
    return "not a directory"


def describe_placement(path: Path) -> str:
    """``socket 0700 at the path`` or ``link to a socket 0600 in /tmp/codex-daemon-<uid>``."""
    info = os.lstat(path)
    if stat.S_ISSOCK(info.st_mode):
        return f"socket {stat.S_IMODE(info.st_mode):04o} at the path"
    if stat.S_ISLNK(info.st_mode):
        target = Path(os.readlink(path))
        where = str(target.parent).replace(str(os.getuid()), "<uid>")
        mode = stat.S_IMODE(os.stat(target).st_mode)
        dir_mode = stat.S_IMODE(os.stat(target.parent).st_mode)
        return f"link to a socket {mode:04o} in {where} ({dir_mode:04o})"
    return stat.filemode(info.st_mode)


def _left_alone(p: Prepared) -> str:
    if p.listener is not None:
        p.listener.settimeout(0.5)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(p.path))
            p.listener.accept()[0].close()
            return "the live socket still answers"
        except OSError as exc:
            return f"the live socket no longer answers ({exc.strerror or exc})"
        finally:
            probe.close()
    target = p.directory if p.content is not None and not p.directory.is_dir() else p.path
    if p.content is not None:
        try:
            same = target.read_bytes() == p.content
        except OSError:
            same = False
        return "the file is intact" if same else "the file was changed or removed"
    if os.path.islink(p.path):
        return "the link is intact"
    return ""


def _connects(path: Path, before: tuple | None) -> bool:
    try:
        now = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if before is not None and (now.st_ino, now.st_mode) == before:
        return False  # what we prepared, not the listener's own
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def upstream_case(codex: Path, base: Path, name: str) -> Outcome:
    p = _prepare(base / "upstream", name)
    home = p.directory.parent / "home"
    home.mkdir()
    try:
        before = os.lstat(p.path)
        before_id = (before.st_ino, before.st_mode)
    except (FileNotFoundError, NotADirectoryError):
        before_id = None
    proc = subprocess.Popen([str(codex), "app-server", "--listen", f"unix://{p.path}"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        serving = False
        while time.monotonic() < deadline and proc.poll() is None:
            if _connects(p.path, before_id):
                serving = True
                break
            time.sleep(0.03)
        if not serving and proc.poll() is None:
            raise RuntimeError(f"codex app-server --listen unix://... ({name}) neither served nor exited "
                               f"in {START_TIMEOUT_S:.0f} s")
        if serving:
            return Outcome("serving", describe_dir(p.directory), placement=describe_placement(p.path))
        err = proc.stderr.read().decode(errors="replace").strip().splitlines()
        return Outcome("refused", describe_dir(p.directory), _left_alone(p), message=(err or ["(no message)"])[-1])
    finally:
        _stop(proc, p)


def _stop(proc: subprocess.Popen, p: Prepared) -> None:
    target = None
    if os.path.islink(p.path):
        target = Path(os.readlink(p.path))
    stop_process(proc)
    p.close()
    # upstream's own socket in /tmp/codex-daemon-<uid>/ (and its lock) when it left them behind
    if target is not None and target.name and target.parent.name.startswith("codex-daemon-"):
        for leftover in (target, target.with_name(target.name + ".lock")):
            try:
                leftover.unlink()
            except OSError:
                pass


def ours_case(base: Path, name: str) -> Outcome:
    p = _prepare(base / "ours", name)
    try:
        directory = sockets.socket_dir(p.directory.parent)
        listener, identity = sockets.bind_listener(directory, SOCKET)
    except sockets.PlacementError as exc:
        outcome = Outcome("refused", describe_dir(p.directory), _left_alone(p), message=str(exc))
        p.close()
        return outcome
    try:
        return Outcome("serving", describe_dir(p.directory), placement=describe_placement(p.path))
    finally:
        listener.close()
        sockets.unlink_if_ours(directory, identity, SOCKET)
        p.close()


def _prepare(root: Path, name: str) -> Prepared:
    case_dir = root / name.replace(" ", "-")
    case_dir.mkdir(parents=True)
    directory = case_dir / sockets.SOCKET_DIR
    prepared = Prepared(directory, directory / SOCKET)
    CASES[name](prepared)
    return prepared


def scratch() -> Path:
    # Not under /tmp: codex refuses to set up its helper aliases with a home there, and its own
    # rendezvous sockets go to /tmp/codex-daemon-<uid>, which the cases must not be confused with.
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="cs-pin-uds-", dir=parent))


def remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)

"""Where a daemon worker's socket lives, how it is bound, and who is on the other end.

The socket sits in ``<state dir>/worker/``: a directory this uid creates with mode 0700 and
re-checks on every start (a real directory, ours, nobody else's bits), so the socket's own
permissions are not the only fence. It is bound under umask 077 through a descriptor of the
checked directory, which also settles ``sun_path``'s 108 bytes: when the path is longer, the
address is ``/proc/self/fd/<dirfd>/worker.sock`` (the kernel follows that link to the directory
we opened, so nothing can be swapped in between the check and the bind).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from pathlib import Path

SOCKET_DIR = "worker"
SOCKET_NAME = "worker.sock"
SUN_PATH_MAX = 107
"""Bytes of a path ``sun_path`` holds (108 with the terminating NUL)."""
LISTEN_BACKLOG = 64


class PlacementError(Exception):
    """The socket cannot be placed safely; the message names the path and what to do."""


class AlreadyServing(PlacementError):
    """A live worker answers at the socket's path."""


def socket_dir(state_dir: str | os.PathLike[str]) -> Path:
    """``<state_dir>/worker``, created 0700 if absent, refused unless it is a real directory
    owned by this uid that nobody else may enter."""
    return own_dir(Path(state_dir) / SOCKET_DIR)


def own_dir(path: Path) -> Path:
    """``path`` created 0700 if absent, refused unless it is a real directory owned by this uid
    that nobody else may enter."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = open_dir(path)
    os.close(fd)
    return path


SHARED_DIR_MODE = 0o711
"""A daemon directory shared with a server of another uid: that uid may reach the socket by its
name, not list or change the directory. The peer check (``--allow-uid``) and the token fence the
socket itself."""


def shared_dir(path: str | os.PathLike[str], *, make_shared: bool | None = True) -> Path:
    """``path`` (``runtime.daemon_dir``, or the state directory's ``worker`` for a server of
    another uid), refused unless it is a real directory owned by this uid that nobody else may
    list or write. ``make_shared``: create it (or open up an existing 0700 one) as 0711; None:
    take it as found (created 0700 if absent)."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = open_dir(path, shared=True)
    try:
        if make_shared:  # the checked directory itself, through its descriptor (never a swapped-in link)
            os.chmod(f"/proc/self/fd/{fd}", SHARED_DIR_MODE)
    finally:
        os.close(fd)
    return path


def client_dir(path: str | os.PathLike[str]) -> Path:
    """The daemon's directory as a server of another uid checks it before it trusts a worker
    there with the workspace's data: a real directory nobody but its owner may write (else an
    impostor could have put its own socket there)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise PlacementError(f"worker directory {path} cannot be used: {exc.strerror or exc}. To proceed: start "
                             "the daemon (codespace-worker start) with the same policy.") from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_mode & 0o022:
        raise PlacementError(f"worker directory {path} refused: its mode is {stat.S_IMODE(info.st_mode):04o}, so "
                             "others may write in it. To proceed: chmod 711 it (the daemon creates it so).")
    return Path(path)


def open_dir(path: str | os.PathLike[str], *, shared: bool = False) -> int:
    """An ``O_PATH`` descriptor of the socket directory, after checking it (no link followed).
    ``shared``: others may traverse it (mode 0711), never list or write it."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PlacementError(f"socket directory {path} refused: it is not a directory (a symbolic link or "
                                 "a file is there). To proceed: remove it; the worker creates a fresh one.") from None
        raise PlacementError(f"socket directory {path} cannot be opened: {exc.strerror}") from None
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.geteuid():
        problem = f"it belongs to uid {info.st_uid}, not to this worker's uid {os.geteuid()}"
    elif info.st_mode & (0o066 if shared else 0o077):
        problem = f"its mode is {stat.S_IMODE(info.st_mode):04o}; others may " + ("list or write it" if shared else "enter it")
    if problem is not None:
        os.close(fd)
        raise PlacementError(f"socket directory {path} refused: {problem}. To proceed: remove it "
                             "(the worker creates a fresh 0700 one) or chmod 700 it.")
    return fd


def address(dir_fd: int, path: Path) -> str:
    """The address to bind or connect: the path itself when ``sun_path`` holds it, else the
    path through the directory's descriptor."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return str(path)
    short = f"/proc/self/fd/{dir_fd}/{path.name}"
    if len(short) > SUN_PATH_MAX:
        raise PlacementError(f"socket name {path.name!r} is too long even through a descriptor")
    return short


def bind_listener(directory: str | os.PathLike[str], name: str = SOCKET_NAME, *,
                  shared: bool = False) -> tuple[socket.socket, tuple]:
    """A listening socket at ``directory/name`` and its identity (for :func:`unlink_if_ours`).
    A stale socket there (one that refuses connections) is removed first; a live one raises
    :class:`AlreadyServing`; anything that is not a socket raises :class:`PlacementError` and
    is left alone."""
    path = Path(directory) / name
    dir_fd = open_dir(directory, shared=shared)
    try:
        _clear_stale(dir_fd, path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        # umask is the process's; the worker binds before it starts any thread.
        previous = os.umask(0o077)
        try:
            sock.bind(address(dir_fd, path))
        except OSError as exc:
            sock.close()
            raise PlacementError(f"cannot bind the worker socket {path}: {exc.strerror}") from None
        finally:
            os.umask(previous)
        if shared:  # another uid connects: its peer credentials and the token are checked instead
            os.chmod(name, 0o666, dir_fd=dir_fd)
        sock.listen(LISTEN_BACKLOG)
        return sock, _identity(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    finally:
        os.close(dir_fd)


def _clear_stale(dir_fd: int, path: Path) -> None:
    try:
        info = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise PlacementError(f"{path} exists and is not a socket; it is left alone. To proceed: move it away "
                             "if nothing needs it, then start the worker again.")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    try:
        probe.connect(address(dir_fd, path))
    except ConnectionRefusedError:
        os.unlink(path.name, dir_fd=dir_fd)  # nobody listens: a dead worker's socket
        return
    except BlockingIOError:
        pass  # a full backlog: somebody is listening
    finally:
        probe.close()
    raise AlreadyServing(f"a worker is already serving at {path}. To proceed: use it, or stop it first "
                         "(codespace-worker stop --workspace DIR).")


def remove_stale(directory: str | os.PathLike[str], name: str = SOCKET_NAME) -> None:
    """Remove ``directory/name`` if it is a socket nobody listens on; raises like :func:`bind_listener`."""
    dir_fd = open_dir(directory)
    try:
        _clear_stale(dir_fd, Path(directory) / name)
    finally:
        os.close(dir_fd)


def _identity(info: os.stat_result) -> tuple:
    # The inode alone is not enough: a freed inode number is handed out again at once, so a
    # successor's socket can have the one ours had. The change time tells them apart.
    return info.st_dev, info.st_ino, info.st_ctime_ns


def unlink_if_ours(directory: str | os.PathLike[str], identity: tuple, name: str = SOCKET_NAME) -> bool:
    """Remove ``directory/name`` if it is still the socket we bound (not a successor's)."""
    try:
        dir_fd = open_dir(directory)
    except PlacementError:
        return False
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISSOCK(info.st_mode) and _identity(info) == identity:
            os.unlink(name, dir_fd=dir_fd)
            return True
    except FileNotFoundError:
        pass
    finally:
        os.close(dir_fd)
    return False


def connect(path: str | os.PathLike[str]) -> socket.socket:
    """A connected, non-blocking socket to the worker at ``path`` (a long path is reached
    through its directory's descriptor)."""
    path = Path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        if len(os.fsencode(path)) <= SUN_PATH_MAX:
            sock.connect(str(path))
        else:
            dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                sock.connect(address(dir_fd, path))
            finally:
                os.close(dir_fd)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected (the kernel's record, not the peer's word)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid

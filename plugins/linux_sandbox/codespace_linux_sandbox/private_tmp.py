"""The Landlock engine's private TMPDIR: a directory per command, gone however the command ended.

Without a mount namespace a command cannot have a tmpfs of its own, so its TMPDIR is a
directory in the host's /tmp. The helper removes it when the command ends, but a helper killed
with SIGKILL (a timeout's watchdog, a server killed with its commands) cannot: the directory,
and whatever the command wrote there, stayed in /tmp for good (one per timed-out command).

So every such directory lives in one parent per uid, ``/tmp/codespace-sandbox-<uid>`` (0711:
the commands' uid must pass through it, nobody needs to list it), and its helper holds an
exclusive ``flock`` on it while it runs. A directory whose lock anyone can take belongs to no
live helper: the server removes those (:func:`stale` and :func:`remove`) after each command
and at start. A parent that is not a directory of ours (another user made it first) is not
used: the directory is then made in /tmp itself, as before, and only its helper removes it.

Removal opens nothing by path below the directory: ``openat``/``unlinkat`` relative to open
directories, never following links, and a tree deeper than :data:`DEPTH` is flattened by
moving its deep directories up, so a hostile tree neither redirects the removal nor exhausts
descriptors or the stack. Runs in the helper (no imports beyond ``posix`` on its path) and in
the server.
"""

import posix

S_IFMT, S_IFDIR = 0o170000, 0o040000
DEPTH = 32  # open directories at most while removing one tree
_DIR_FLAGS = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
_PREFIX = "codespace-sandbox-"
TMP = "/tmp"


def _base(run_dir: str) -> str:
    try:
        return TMP if S_IFMT & posix.stat(TMP).st_mode == S_IFDIR else run_dir
    except OSError:
        return run_dir


def parent(run_dir: str) -> str:
    return f"{_base(run_dir)}/{_PREFIX}{posix.geteuid()}"


def _own_parent(path: str) -> bool:
    """``path`` is (now) a directory of this uid that nobody else can write in."""
    try:
        posix.mkdir(path, 0o711)
        posix.chmod(path, 0o711)  # whatever the umask: the command's uid (run_as) passes through
    except FileExistsError:
        pass
    except OSError:
        return False
    st = posix.lstat(path)
    return st.st_mode & S_IFMT == S_IFDIR and st.st_uid == posix.geteuid() and not st.st_mode & 0o022


def make(run_dir: str) -> tuple[str, int]:
    """A new private directory for one command and the descriptor holding its lock (keep it open
    until :func:`remove`)."""
    from . import libc

    home, prefix = parent(run_dir), ""
    if not _own_parent(home):
        home, prefix = _base(run_dir), _PREFIX
    for _ in range(100):
        path = f"{home}/{prefix}{posix.urandom(6).hex()}"
        try:
            posix.mkdir(path, 0o700)
            fd = posix.open(path, _DIR_FLAGS)
        except FileExistsError:
            continue
        except FileNotFoundError:  # a sweep took it between mkdir and open: it looked unowned
            continue
        libc.flock(fd, libc.LOCK_EX)  # waits for a sweep that got there first ...
        if posix.fstat(fd).st_nlink:
            return path, fd
        posix.close(fd)  # ... and removed it
    raise FileExistsError(f"cannot create a private TMPDIR under {home}")


def stale(run_dir: str) -> list[tuple[str, int]]:
    """The directories under this uid's parent that no live helper holds, each as (its path, a
    descriptor holding its lock): pass each to :func:`remove`."""
    from . import libc

    try:
        home = posix.open(parent(run_dir), _DIR_FLAGS)
    except OSError:
        return []
    found = []
    try:
        for entry in posix.scandir(home):
            if len(entry.name) != 12 or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                fd = _open_dir(entry.name, home)
            except OSError:
                continue
            if libc.flock(fd, libc.LOCK_EX | libc.LOCK_NB) == 0:
                found.append((f"{parent(run_dir)}/{entry.name}", fd))
            else:
                posix.close(fd)
    finally:
        posix.close(home)
    return found


def remove(path: str, fd: int) -> None:
    """Remove the directory ``path``, open (and locked) as ``fd``, with everything in it; closes ``fd``.
    What cannot be removed stays, silently: this is clean-up."""
    try:
        posix.fchmod(fd, 0o700)  # a command may have taken the permissions removal needs
    except OSError:
        pass
    try:
        _empty(fd)
        posix.rmdir(path)
    except OSError:
        pass
    finally:
        posix.close(fd)


def _empty(top: int) -> None:
    """Remove everything inside the open directory ``top``, depth first, by descriptors only."""
    stack = [(top, "", _subdirs(top))]  # (open directory, its name in the one above, subdirectories left)
    while stack:
        fd, name, left = stack[-1]
        if not left:
            stack.pop()
            if stack:
                posix.close(fd)
                try:
                    posix.rmdir(name, dir_fd=stack[-1][0])
                except OSError:
                    pass
            continue
        sub = left.pop()
        if len(stack) >= DEPTH:
            # Too deep to keep descending with a descriptor per level: move it to the top.
            up = f".deep-{posix.urandom(6).hex()}"  # a name the command cannot have taken in advance
            try:
                posix.rename(sub, up, src_dir_fd=fd, dst_dir_fd=top)
                stack[0][2].append(up)
            except OSError:
                pass
            continue
        try:
            child = _open_dir(sub, fd)
        except OSError:
            continue
        stack.append((child, sub, _subdirs(child)))


def _open_dir(name: str, dir_fd: int) -> int:
    """Open the directory ``name`` without following a link, and make it 0700: a command may have
    left it without the permissions that removing its entries needs (it owns it unless the server
    is root, and then the server needs none)."""
    try:
        fd = posix.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        where = posix.open(name, posix.O_PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=dir_fd)
        try:
            posix.chmod(f"/proc/self/fd/{where}", 0o700)  # the directory opened, not what the name may now be
        finally:
            posix.close(where)
        fd = posix.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        posix.fchmod(fd, 0o700)
    except OSError:
        pass
    return fd


def _subdirs(fd: int) -> list[str]:
    """Unlink every entry of the open directory ``fd`` that is not a directory; the names of those that are."""
    dirs = []
    try:
        entries = list(posix.scandir(fd))
    except OSError:
        return dirs
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
            else:
                posix.unlink(entry.name, dir_fd=fd)
        except OSError:
            pass
    return dirs

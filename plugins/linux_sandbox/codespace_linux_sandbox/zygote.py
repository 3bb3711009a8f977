"""The warm helper ("zygote"): started once per server, forks one per-command helper per command.

A Python interpreter start costs 7 ms quiet and 12-25 ms on a loaded machine, the better
part of a sandboxed ``/bin/true``. The zygote pays it once: the server starts it (same
entry script, ``CODESPACE_FD_ZYGOTE`` names its socket) and it hardens itself, imports
everything both engines need, says ``READY`` and then serves requests on a private
``SOCK_SEQPACKET`` socketpair, one at a time:

    server → zygote   b"CSZ1" + SCM_RIGHTS [stdin, stdout, stderr, handshake, (seccomp)]
                      (b"CSZ1+u": one more, last, the user namespace of the id mapping)
    zygote → server   b"P<pid>"  or  b"E<message>"

For each request it forks the per-command helper with ``clone(CLONE_PARENT)``: the new
process is a child of the *server*, not of the zygote, so the server waits for it and reaps
it like any child of its own (exit status straight from the kernel, no relay), and the
command outlives neither a crash of the zygote nor one of its own siblings. The child
leads a new session (the pid the host signals and sweeps; the zygote replies only once it
does), asks for SIGTERM when the server dies, puts the three descriptors on 0/1/2 and runs
:func:`.helper.run` with the handshake exactly as a helper started per command would
(handshake v1 checks, messages, exit codes, engines, supervision).

Runs in the warm helper (:func:`serve`) and, after each clone, in the per-command helper
(:func:`_become_per_command_helper`).

Hardening (DESIGN §6, :mod:`codespace.contract.hardening`) happens here once and is
inherited by every child: non-dumpable, ``RLIMIT_CORE`` 0, ``LD_*`` removed; failure is
fatal with upstream's exit codes. The
zygote dies with the server (``PR_SET_PDEATHSIG`` SIGKILL, re-checked) and exits when the
server closes its end of the socket.
"""


import _socket
import posix
import sys

from . import helper, libc
from .core_hardening import harden_or_fail
from .failure import SETUP_FAILED_EXIT_CODE, fail

REQUEST = b"CSZ1"
REQUEST_USERNS = b"CSZ1+u"  # the last descriptor is the user namespace of options.run_as's id mapping
READY = b"READY1"
MAX_FDS = 6
_INT = 4


def _preload() -> None:
    # Everything a per-command helper may need, imported once here instead of in every child.
    import _json  # noqa: F401 - the handshake's scanner

    from . import (  # noqa: F401
        bwrap_argv,
        bwrap_engine,
        identity,
        landlock,
        landlock_child,
        landlock_engine,
        placeholders,
        proxy_route,
        supervise,
        unix_broker,
        unix_inside,
    )


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := posix.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _become_per_command_helper(channel: _socket.socket, fds: list[int], server: int, in_session: int,
                               userns: int | None) -> None:
    """The per-command helper, in the child of clone(CLONE_PARENT). Never returns."""
    code = SETUP_FAILED_EXIT_CODE
    try:
        channel.close()  # never hold the zygote's socket: the server watches it for the zygote's end
        posix.setsid()
        posix.close(in_session)  # lets the zygote reply with our pid
        libc.prctl(libc.PR_SET_PDEATHSIG, 15)  # SIGTERM, as for every command the host starts
        if posix.getppid() != server:
            posix._exit(1)  # the server died before the signal was armed
        for target, fd in enumerate(fds[:3]):
            posix.dup2(fd, target)
        for fd in fds[:3]:
            if fd > 2:
                posix.close(fd)
        raw = _read_all(fds[3])
        posix.close(fds[3])
        code = helper.run(raw, fds[4] if len(fds) > 4 else None, hardened=True, userns_fd=userns)
    except BaseException as exc:  # noqa: BLE001 - a child must never return into the zygote's loop
        fail(f"the warm helper's child failed: {exc}")
    posix._exit(code)


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + _INT], sys.byteorder)
                    for i in range(0, len(data) - len(data) % _INT, _INT)]
    return fds


def serve(channel_fd: bytes, parent: bytes) -> int:
    """The zygote's main loop (see the module docstring); returns its exit code."""
    server = int(parent) if parent.isdigit() else -1
    libc.prctl(libc.PR_SET_PDEATHSIG, 9)
    if posix.getppid() != server:
        return 1  # the server is already gone (or this was not started by one)
    if code := harden_or_fail():
        return code
    for name in [k for k in posix.environ if k.startswith(b"CODESPACE_")]:
        posix.unsetenv(name)
        del posix.environ[name]
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, int(channel_fd))
    _preload()
    channel.send(READY)
    ancillary_space = _socket.CMSG_SPACE(MAX_FDS * _INT)
    while True:
        try:
            # Close-on-exec: what a command needs is dup2'd onto 0-2 or handed on by name
            # (bwrap's --seccomp FD); the rest, e.g. the id mapping's user namespace, must not
            # reach the command.
            data, ancillary, _flags, _ = channel.recvmsg(64, ancillary_space, _socket.MSG_CMSG_CLOEXEC)
        except OSError:
            return 0
        if not data:
            return 0  # the server closed its end
        fds = _fds(ancillary)
        userns = fds.pop() if data == REQUEST_USERNS and fds else None
        if data not in (REQUEST, REQUEST_USERNS) or len(fds) not in (4, 5):
            if userns is not None:
                posix.close(userns)
            for fd in fds:
                posix.close(fd)
            channel.send(b"E" + f"malformed request ({len(data)} bytes, {len(fds)} descriptors)".encode())
            continue
        # The reply waits until the child leads its session: a host that signals the pid's
        # group at once (a 1 ms timeout) would otherwise find no such group, and the child,
        # unsignalled, would go on to run the command.
        in_session: tuple[int, int] | None = None
        try:
            in_session = posix.pipe()
            pid = libc.clone_parent()
        except OSError as exc:
            reply = b"E" + str(exc).encode("utf-8", "replace")
        else:
            if pid == 0:
                posix.close(in_session[0])
                _become_per_command_helper(channel, fds, server, in_session[1], userns)
            reply = b"P%d" % pid
        if in_session is not None:
            posix.close(in_session[1])
            posix.read(in_session[0], 1)  # end of file: the child called setsid() (or died; or none)
            posix.close(in_session[0])
        for fd in fds:
            posix.close(fd)
        if userns is not None:
            posix.close(userns)
        channel.send(reply)


"""The helper's side of the egress proxy route (network ``allowlist``).

Runs in the per-command helper.

The server's proxy gives each sandboxed command a route: a private Unix socket (0600, in a
0700 directory of the state directory, never visible inside the sandbox). The helper
connects to it before the command starts and keeps that connection open while it
supervises: the proxy learns the helper's pid from the kernel (``SO_PEERCRED``; the
operation that started it), and the connection's end — exit, crash or SIGKILL alike —
releases the route.

- bubblewrap: the sandbox has its own network namespace with nothing but ``lo``. Once
  bwrap has built it (and waits on ``--block-fd``), a short-lived child of the helper
  enters that namespace (``setns``; its owning user namespace first, which the same user
  may join), listens on ``127.0.0.1:<port>`` there, and hands the listening socket to the
  proxy over the route with ``SCM_RIGHTS``. The proxy accepts the command's connections
  directly from it: no bridge process, no extra hop, nothing of the host mounted inside.
  A UDP socket bound to the same port goes along: the SOCKS5 UDP relay's address inside
  (used only with ``network.enable_socks5_udp``).
- Landlock: no namespace; the proxy listens on a loopback port of its own for this
  command, and the helper only announces itself.

Only ``posix`` and ``_socket`` are imported: this runs on the command's critical path.
"""


import _socket
import posix
import sys

from . import libc

HEADER = b"\0CSROUTE1"  # never the first bytes of HTTP or SOCKS5 on the same socket
LISTEN_BACKLOG = 512
IP_FREEBIND = 15  # bind 127.0.0.1 even if bwrap has not brought lo up yet
EINVAL = 22


def register(path: str, *, announce: bool) -> int:
    """Connect to the route; with ``announce`` send the header now (else the listener's sender
    does). Returns the connection's descriptor, to keep open while the command runs; raises
    RuntimeError saying why the proxy cannot be reached."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
        if announce:
            sock.sendall(HEADER)
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"cannot reach the egress proxy ({path}): {exc.strerror or exc}") from None
    return sock.detach()


def _enter_network_namespace(pid: int) -> None:
    net = posix.open(f"/proc/{pid}/ns/net", posix.O_RDONLY | posix.O_CLOEXEC)
    owner = libc.ioctl(net, libc.NS_GET_USERNS)
    if owner < 0:
        raise RuntimeError(f"cannot find the user namespace owning the sandbox's network namespace: "
                           f"{posix.strerror(libc.errno())}")
    if libc.setns(owner, libc.CLONE_NEWUSER) != 0 and libc.errno() != EINVAL:  # EINVAL: already in it
        raise RuntimeError(f"setns(user namespace of the sandbox) failed: {posix.strerror(libc.errno())}")
    if libc.setns(net, libc.CLONE_NEWNET) != 0:
        raise RuntimeError(f"setns(network namespace of the sandbox) failed: {posix.strerror(libc.errno())}")


def listen_inside(sandbox_pid: int, port: int, registration: int) -> None:
    """Listen on 127.0.0.1:``port`` inside the network namespace of ``sandbox_pid`` and hand the
    socket to the proxy over ``registration``; raises RuntimeError with the reason when that fails."""
    errors_read, errors_write = posix.pipe()
    child = posix.fork()  # setns(user namespace) needs a single-threaded process of its own
    if child == 0:
        try:
            posix.close(errors_read)
            _enter_network_namespace(sandbox_pid)
            listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            listener.setsockopt(_socket.IPPROTO_IP, IP_FREEBIND, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(LISTEN_BACKLOG)
            # The SOCKS5 UDP relay's address inside (the proxy closes it unless UDP is enabled).
            relay = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
            relay.setsockopt(_socket.IPPROTO_IP, IP_FREEBIND, 1)
            relay.bind(("127.0.0.1", port))
            route = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, registration)
            fds = listener.fileno().to_bytes(4, sys.byteorder) + relay.fileno().to_bytes(4, sys.byteorder)
            route.sendmsg([HEADER], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
            posix._exit(0)
        except BaseException as exc:  # noqa: BLE001 - reported through the pipe
            try:
                posix.write(errors_write, str(exc).encode("utf-8", "replace")[:2000])
            finally:
                posix._exit(1)
    posix.close(errors_write)
    message = b""
    while chunk := posix.read(errors_read, 4096):
        message += chunk
    posix.close(errors_read)
    _, status = posix.waitpid(child, 0)
    if status != 0:
        detail = message.decode("utf-8", "replace") or f"exit status {posix.waitstatus_to_exitcode(status)}"
        raise RuntimeError(f"cannot open the proxy listener inside the sandbox's network namespace: {detail}")

"""The proxy of one served workspace, run as a ``codespace_services`` service.

It listens on a loopback TCP port (shared; unattributed) and gives each sandboxed
command a *route* (:meth:`ProxyService.open_route`): a private Unix socket (0600, in a
0700 directory) that only that command's helper uses, never the command itself. The
helper registers there while it supervises (:mod:`codespace_linux_sandbox.proxy_route`):

- under bubblewrap it hands over a listening socket it opened on 127.0.0.1 *inside* the
  sandbox's network namespace; the proxy accepts the command's connections from it;
- under Landlock the route has a loopback TCP listener of its own, the only port the
  command's Landlock rules let it connect to.

Either way every connection belongs to exactly one route, so to one command: no command
can speak with another's identity. The registration gives the helper's pid (from the
kernel, ``SO_PEERCRED``); its end (the helper exited, however) releases the route, as do
``release`` and a registration that never comes.

Decisions go to the operation store in batches (the network audit trail), with the
operation that started the command: given to :meth:`open_route` when the host passes it,
otherwise found in the store as the operation whose process is the registered helper
(the registry records each command's leader pid and start time). Full URLs are never
recorded.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from codespace.contract import NetworkEvent, ToolError

from ..proxy_route import HEADER, LISTEN_BACKLOG
from . import sockets
from .checkpoint import AuditEvent
from .rules import DomainRules
from .server import EgressProxy
from .sockets import RawStream

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2
SOCKET_DIR = "proxy"
SUN_PATH_MAX = 108  # sockaddr_un.sun_path on Linux, with its terminating NUL
REGISTRATION_TIMEOUT_S = 60.0


def rules_from_policy(network: Any) -> DomainRules:
    return DomainRules(
        network.allowed_domains, network.denied_domains,
        limited=network.mode == "limited", allow_local_binding=network.allow_local_binding,
    )


@dataclass(eq=False)
class Route:
    """One command's way to the proxy."""

    path: str
    operation_id: str | None
    unix: socket.socket
    tcp: socket.socket | None = None
    port: int | None = None  # the TCP listener's port (Landlock)
    disown: Callable[[], None] | None = field(default=None, repr=False)  # its port, a destination again
    registered: anyio.Event = field(default_factory=anyio.Event, repr=False)
    released: bool = False
    scope: anyio.CancelScope | None = field(default=None, repr=False)


class ProxyService:
    def __init__(self, rules: DomainRules, store: Any, state_dir: Path, *, resolver: Any = None,
                 udp: bool = False) -> None:
        self.proxy = EgressProxy(rules, self._audit, **({"resolver": resolver} if resolver else {}), udp=udp)
        self.store = store
        self.socket_dir = state_dir / SOCKET_DIR
        self.tcp_port: int | None = None
        self._pending: list[AuditEvent] = []
        self._tg: TaskGroup | None = None
        self._routes: dict[str, Route] = {}  # open routes by path
        self._known: dict[str, Route] = {}  # routes events may still refer to (released ones too)
        self._started = anyio.Event()

    @property
    def running(self) -> bool:
        return self._tg is not None

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(self.socket_dir)
        if not os.path.isdir(self.socket_dir) or os.path.islink(self.socket_dir) or st.st_uid != os.getuid():
            raise RuntimeError(f"{self.socket_dir} is not a directory of this user")
        os.chmod(self.socket_dir, 0o700)
        for stale in self.socket_dir.glob("*.sock"):  # a crashed server's sockets nobody listens on
            stale.unlink(missing_ok=True)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self.tcp_port = await tg.start(self.proxy.serve_tcp)
                tg.start_soon(self._flush_forever)
                self._started.set()
                log.info("egress proxy on 127.0.0.1:%d", self.tcp_port)
        finally:
            self._tg = None
            for path in list(self._routes):
                self.release(path)
            with anyio.CancelScope(shield=True):
                await self._flush()

    async def wait_started(self) -> None:
        await self._started.wait()

    # -- routes -------------------------------------------------------------------------

    def route_for(self, operation_id: str | None) -> str:
        """A fresh Unix socket for one sandboxed command (listening before this returns)."""
        return self.open_route(operation_id).path

    def open_route(self, operation_id: str | None, *, tcp: bool = False) -> Route:
        """A route for one sandboxed command; ``tcp``: with a loopback listener of its own
        (``route.port``) for engines without a network namespace. Listening before this returns."""
        if self._tg is None:
            raise RuntimeError("the egress proxy is not running")
        # Short and not the agent's: an operation id in the name (up to 80 characters) pushed
        # the path past sun_path's 108 bytes under a deep state directory.
        path = str(self.socket_dir / f"r-{os.urandom(6).hex()}.sock")
        if len(os.fsencode(path)) >= SUN_PATH_MAX:
            raise ToolError(f"the egress proxy cannot make a socket under {self.socket_dir}: the path would be "
                            f"{len(os.fsencode(path))} bytes, over the {SUN_PATH_MAX - 1} a Unix socket allows. To "
                            "proceed: give the server a shorter state directory (--state-dir or CODESPACE_STATE_DIR)",
                            code="sandbox_unavailable")
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tcp_sock = None
        try:
            unix.bind(path)
            os.chmod(path, 0o600)
            unix.listen(16)
            if tcp:
                tcp_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                tcp_sock.bind(("127.0.0.1", 0))
                tcp_sock.listen(LISTEN_BACKLOG)
        except BaseException:
            unix.close()
            if tcp_sock is not None:
                tcp_sock.close()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            raise
        route = Route(path, operation_id, unix, tcp_sock, tcp_sock.getsockname()[1] if tcp_sock else None)
        if tcp_sock is not None:  # on this host: the proxy must not connect to it, from now on
            route.disown = self.proxy.own(tcp_sock, "tcp")
        self._routes[path] = self._known[path] = route
        self._tg.start_soon(self._serve_route, route)
        return route

    async def _serve_route(self, route: Route) -> None:
        try:
            with anyio.CancelScope() as scope:
                route.scope = scope
                if route.released:
                    return
                async with anyio.create_task_group() as tg:
                    tg.start_soon(sockets.serve, route.unix, lambda conn: self._route_connection(conn, route, tg))
                    if route.tcp is not None:
                        tg.start_soon(self.proxy.serve_listener, route.tcp, route.path)
                    with anyio.move_on_after(REGISTRATION_TIMEOUT_S):
                        await route.registered.wait()
                    if route.registered.is_set():
                        await anyio.sleep_forever()  # until released
                    log.warning("proxy route %s was never registered; released", route.path)
                    scope.cancel()
        except Exception:  # noqa: BLE001 - one command's route must not take the proxy down (it fails closed)
            log.exception("proxy route %s failed", route.path)
        finally:
            self.release(route.path)

    async def _route_connection(self, conn: socket.socket, route: Route, tg: TaskGroup) -> None:
        """The helper's registration (then held until it ends), or a client of the proxy."""
        conn.setblocking(False)
        try:
            data, fds = await _receive_with_fds(conn)
            while len(data) < len(HEADER) and HEADER.startswith(data) and data and not fds:
                more, fds = await _receive_with_fds(conn)
                if not more:
                    break
                data += more
        except OSError:
            conn.close()
            return
        if not data.startswith(HEADER):
            for fd in fds:
                os.close(fd)
            if data:
                await self.proxy.handle(RawStream(conn), route.path, initial=data)
            else:
                conn.close()
            return
        with conn:
            if route.registered.is_set():
                for fd in fds:
                    os.close(fd)
                return  # one helper per route
            route.registered.set()
            for fd in fds:
                sock = socket.socket(fileno=fd)
                if sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM:
                    tg.start_soon(self.proxy.serve_listener, sock, route.path)
                elif sock.family == socket.AF_INET and sock.type == socket.SOCK_DGRAM and self.proxy.udp:
                    tg.start_soon(self.proxy.serve_route_udp, sock, route.path)
                else:
                    sock.close()
            while True:  # nothing more is expected: wait for the helper's end
                try:
                    if not conn.recv(4096):
                        break
                except BlockingIOError:
                    await anyio.wait_readable(conn)
                except OSError:
                    break
        self.release(route.path)

    def release(self, path: str) -> None:
        """Stop serving a command's route (its command ended); idempotent."""
        route = self._routes.pop(path, None)
        if route is None:
            return
        route.released = True
        if route.disown is not None:
            route.disown()
        if route.scope is not None:
            route.scope.cancel()  # closes its listeners and ends its tunnels
        else:
            route.unix.close()
            if route.tcp is not None:
                route.tcp.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # -- audit ---------------------------------------------------------------------------

    def _audit(self, event: AuditEvent) -> None:
        self._pending.append(event)
        log.info("proxy %s %s %s:%d (%s)", event.decision, event.protocol, event.host, event.port, event.reason)

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        routes = {e.operation_id: self._known.get(e.operation_id) for e in batch if e.operation_id is not None}
        ready = []
        for event in batch:
            route = routes.get(event.operation_id) if event.operation_id is not None else None
            ready.append(NetworkEvent(
                at=event.at, operation_id=route.operation_id if route is not None else None, decision=event.decision,
                reason=event.reason, protocol=event.protocol, host=event.host, port=event.port, method=event.method,
            ))
        for path in [p for p, r in self._known.items() if r.released]:
            del self._known[path]
        if ready:
            try:
                await self.store.record_network(ready)
            except Exception:  # noqa: BLE001 - a closing store must not take the proxy down
                log.exception("cannot record %d proxy decisions", len(ready))

    async def _flush_forever(self) -> None:
        while True:
            await anyio.sleep(FLUSH_INTERVAL_S)
            await self._flush()


MAX_ROUTE_FDS = 4  # a registration sends two (the TCP listener and the UDP relay socket)


async def _receive_with_fds(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The next bytes from a Unix stream socket, with the descriptors that came with them."""
    while True:
        try:
            data, ancillary, _flags, _ = conn.recvmsg(65536, socket.CMSG_SPACE(4 * MAX_ROUTE_FDS))
        except BlockingIOError:
            await anyio.wait_readable(conn)
            continue
        fds = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, len(payload) - 3, 4)]
        return data, fds

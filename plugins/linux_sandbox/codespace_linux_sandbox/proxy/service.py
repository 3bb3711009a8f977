"""The proxy of one served workspace, run as a ``codespace_services`` service.

It listens on a loopback TCP port (for engines that route by port) and, per
sandboxed command, on a private Unix socket that is bind-mounted into that
command's sandbox only: a connection's socket tells which operation made it, and
no command can speak with another's identity. Decisions go to the operation store
in batches (the network audit trail); full URLs are never recorded.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketListener, TaskGroup

from codespace.store import NetworkEvent

from .rules import DomainRules
from .server import AuditEvent, EgressProxy

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.2
SOCKET_DIR = "proxy"


def rules_from_policy(network: Any) -> DomainRules:
    return DomainRules(
        network.allowed_domains, network.denied_domains,
        limited=network.mode == "limited", allow_local_binding=network.allow_local_binding,
    )


class ProxyService:
    def __init__(self, rules: DomainRules, store: Any, state_dir: Path, *, resolver: Any = None) -> None:
        self.proxy = EgressProxy(rules, self._audit, **({"resolver": resolver} if resolver else {}))
        self.store = store
        self.socket_dir = state_dir / SOCKET_DIR
        self.tcp_port: int | None = None
        self._pending: list[NetworkEvent] = []
        self._tg: TaskGroup | None = None
        self._routes: dict[str, tuple[socket.socket, anyio.CancelScope | None]] = {}
        self._started = anyio.Event()

    # -- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        self.socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
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
            with anyio.CancelScope(shield=True):
                await self._flush()
            for path in list(self._routes):
                self.release(path)

    async def wait_started(self) -> None:
        await self._started.wait()

    # -- routes -------------------------------------------------------------------------

    def route_for(self, operation_id: str | None) -> str:
        """A fresh Unix socket for one sandboxed command; listening before this returns."""
        if self._tg is None:
            raise RuntimeError("the egress proxy is not running")
        name = f"{(operation_id or 'anonymous')[:80]}-{os.urandom(4).hex()}.sock"
        path = str(self.socket_dir / name)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(64)
        self._routes[path] = (sock, None)
        self._tg.start_soon(self._serve_route, path, sock, operation_id)
        return path

    async def _serve_route(self, path: str, sock: socket.socket, operation_id: str | None) -> None:
        with anyio.CancelScope() as scope:
            if path not in self._routes:
                return
            self._routes[path] = (sock, scope)
            listener: SocketListener = await SocketListener.from_socket(sock)
            async with listener:
                await listener.serve(lambda stream: self.proxy.handle(stream, operation_id))

    def release(self, path: str) -> None:
        """Stop listening on a command's socket (its command ended)."""
        sock, scope = self._routes.pop(path, (None, None))
        if scope is not None:
            scope.cancel()
        elif sock is not None:
            sock.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # -- audit ---------------------------------------------------------------------------

    def _audit(self, event: AuditEvent) -> None:
        self._pending.append(NetworkEvent(
            at=event.at, operation_id=event.operation_id, decision=event.decision, reason=event.reason,
            protocol=event.protocol, host=event.host, port=event.port, method=event.method,
        ))
        log.info("proxy %s %s %s:%d (%s)", event.decision, event.protocol, event.host, event.port, event.reason)

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch:
            try:
                await self.store.record_network(batch)
            except Exception:  # noqa: BLE001 - a closing store must not take the proxy down
                log.exception("cannot record %d proxy decisions", len(batch))

    async def _flush_forever(self) -> None:
        while True:
            await anyio.sleep(FLUSH_INTERVAL_S)
            await self._flush()

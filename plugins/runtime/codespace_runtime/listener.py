"""The worker's listener: accepts connections on its socket, refuses a peer whose uid is not
allowed before a byte is read or written, and serves each of the others as its own task
(:func:`service.serve_connection`) until it is told to stop."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Collection, Mapping

from .service import Connections, Drain, ErrorMapper, Handler, serve_connection
from .sockets import peer_credentials

_log = logging.getLogger("codespace_runtime.listener")


async def serve_listener(listener: socket.socket, token: bytes, handlers: Mapping[str, Handler],
                         status: Callable[[], dict], *, allowed_uids: Collection[int],
                         errors: ErrorMapper | None = None, workspace: str = "",
                         policy_digest: str | None = None, stop: asyncio.Event | None = None,
                         hub: Connections | None = None, drain: Drain | None = None,
                         lane_spin_s: float = 0.0) -> None:
    """Accept and serve connections until ``stop`` is set (by a ``shutdown`` or the caller).
    A peer whose uid is not in ``allowed_uids`` is closed before a byte is read or written.
    ``drain`` runs once ``stop`` is set, while the connections are still open (the runner ends
    its sessions there, and their owners are told)."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    stop = stop if stop is not None else asyncio.Event()
    hub = hub if hub is not None else Connections()
    allowed = frozenset(allowed_uids)
    connections: set[asyncio.Task] = set()

    async def accept_forever() -> None:
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: say so, breathe, go on
                _log.error("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            pid, uid, _gid = peer_credentials(conn)
            if uid not in allowed:
                _log.warning("refused a connection from pid %d uid %d: not an allowed uid (%s)", pid, uid,
                             ", ".join(map(str, sorted(allowed))))
                conn.close()
                continue
            task = asyncio.create_task(serve_connection(conn, token, handlers, status, errors=errors,
                                                        workspace=workspace, policy_digest=policy_digest,
                                                        stop=stop, hub=hub, lane_spin_s=lane_spin_s))
            connections.add(task)
            task.add_done_callback(connections.discard)

    accepting = asyncio.create_task(accept_forever())
    try:
        await stop.wait()
        accepting.cancel()
        if drain is not None:
            await drain()
    finally:
        accepting.cancel()
        for task in list(connections):
            task.cancel()
        await asyncio.gather(accepting, *connections, return_exceptions=True)

"""``codespace-worker serve``: one worker process, from hardening to the last connection.

Child mode (``--fd``): the server's end of a socket pair is the only connection; the worker
stops when it closes, on ``shutdown``, or when the parent dies. Path mode (``--socket``): it
listens (the daemon), holding ``worker.pid``'s lock for as long as it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from codespace.contract import gate

from . import daemon, sockets, tokens
from .hardening import UMASK_ENV, current_umask, harden_worker, reexec_without_ld
from .lane_client import spin_seconds
from .listener import serve_listener
from .service import Drain, Handler, serve_connection

EXIT_USAGE = 2
_log = logging.getLogger("codespace_runtime.worker")


class StartError(Exception):
    """The worker cannot start; the message says why and what to do (exit status 2)."""


@dataclass
class ServeArgs:
    workspace: str
    token_file: str
    fd: int | None = None
    socket: str | None = None
    allow_uids: list[int] = field(default_factory=list)
    parent_pid: int | None = None
    runner: bool = True


def serve(args: ServeArgs) -> int:
    """Run the worker; the exit status (0 after a clean stop)."""
    # The parent is noted before anything else: once it is gone, getppid() says 1 (or a subreaper).
    parent = args.parent_pid if args.parent_pid is not None else (os.getppid() if args.fd is not None else None)
    args.workspace = os.path.abspath(args.workspace)  # cwd becomes / below
    args.token_file = os.path.abspath(args.token_file)
    if args.socket is not None:
        args.socket = os.path.abspath(args.socket)
    keep = [args.fd] if args.fd is not None else []
    os.environ.setdefault(UMASK_ENV, current_umask())  # before the hardening's 077: the agent's files'
    reexec_without_ld(keep)
    harden_worker(keep, parent_pid=parent)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="codespace-worker[%(process)d] %(message)s")
    try:
        return _serve_hardened(args)
    except (StartError, tokens.TokenError, sockets.PlacementError, gate.WorkspaceError) as exc:
        sys.stderr.write(f"codespace-worker: {exc}\n")
        return EXIT_USAGE


def _serve_hardened(args: ServeArgs) -> int:
    # The policy file a server starting its child names (the runner loads the same file).
    view = gate.open_workspace(args.workspace, policy_path=os.environ.get("CODESPACE_WORKER_POLICY") or None)
    token = tokens.load_token(args.token_file)
    handlers, status, lifespan = load_handlers(str(view.root)) if args.runner else ({}, dict, contextlib.nullcontext)
    digest = policy_digest(view)
    allowed = args.allow_uids or [os.getuid()]
    spin_s = spin_seconds(view.policy)
    if args.fd is not None:
        channel = _channel(args.fd)
        return asyncio.run(_within(lifespan, lambda _drain: _run_child(channel, token, handlers, status,
                                                                       str(view.root), digest, allowed, spin_s)))
    path = Path(args.socket)
    shared = any(uid != os.geteuid() for uid in allowed)  # a server of another uid attaches
    lock_fd = daemon.lock_pid_file(path.parent / daemon.PID_FILE, shared=shared)
    try:
        listener, identity = sockets.bind_listener(path.parent, path.name, shared=shared)
        try:
            _log.info("serving %s on %s for uid(s) %s", view.root, path, ", ".join(map(str, allowed)))
            asyncio.run(_within(lifespan, lambda drain: _run_listener(listener, token, handlers, status,
                                                                      str(view.root), digest, allowed, drain,
                                                                      spin_s)))
        finally:
            sockets.unlink_if_ours(path.parent, identity, path.name)
            listener.close()
    finally:
        daemon.release_pid_file(path.parent / daemon.PID_FILE, lock_fd)
    _log.info("stopped")
    return 0


T = TypeVar("T")


async def _within(lifespan: Callable[[], Any], serving: Callable[[Drain | None], Awaitable[T]]) -> T:
    """Serve inside the runner's lifespan: its command registry lives while the worker serves
    (and ends every session when it stops). The lifespan yields the runner's drain (end every
    session now), which a listener runs before it closes its connections, so the servers
    attached to a daemon that is stopping hear how their commands ended."""
    async with lifespan() as drain:
        return await serving(drain)


def load_handlers(root: str) -> tuple[Mapping[str, Handler], Callable[[], dict], Callable[[], Any]]:
    """The runner's handlers when the runner module is installed; the built-in methods alone
    otherwise. A runner that fails to import is an error, not a silent fallback."""
    if importlib.util.find_spec("codespace_runtime.runner") is None:
        return {}, dict, contextlib.nullcontext
    from . import runner  # type: ignore[attr-defined]

    return runner.handlers_for(root)


def policy_digest(view: object) -> str | None:
    """sha256 of the policy file the workspace was opened with (None without one)."""
    path = getattr(view, "policy_path", None)
    if path is None:
        return None
    with open(path, "rb") as policy:
        return hashlib.sha256(policy.read()).hexdigest()


def _channel(fd: int) -> socket.socket:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise StartError(f"--fd {fd} is not an open socket: {exc.strerror}. To proceed: pass the worker's end "
                         "of a socketpair(AF_UNIX, SOCK_STREAM).") from None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise StartError(f"--fd {fd} is not a Unix stream socket. To proceed: pass the worker's end of a "
                         "socketpair(AF_UNIX, SOCK_STREAM).")
    return sock


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)


async def _run_child(channel: socket.socket, token: bytes, handlers: Mapping[str, Handler],
                     status: Callable[[], dict], root: str, digest: str | None, allowed: Sequence[int],
                     spin_s: float) -> int:
    stop = asyncio.Event()
    _stop_on_signals(stop)
    _pid, uid, _gid = sockets.peer_credentials(channel)
    if uid not in allowed:
        channel.close()
        raise StartError(f"the peer of --fd runs as uid {uid}, which is not allowed (--allow-uid)")
    serving = asyncio.create_task(serve_connection(channel, token, handlers, status, workspace=root,
                                                   policy_digest=digest, stop=stop, errors=_errors(handlers),
                                                   lane_spin_s=spin_s))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    for task in (serving, stopping):
        task.cancel()
    await asyncio.gather(serving, stopping, return_exceptions=True)
    return 0


async def _run_listener(listener: socket.socket, token: bytes, handlers: Mapping[str, Handler],
                        status: Callable[[], dict], root: str, digest: str | None, allowed: Sequence[int],
                        drain: Drain | None, spin_s: float) -> None:
    stop = asyncio.Event()
    _stop_on_signals(stop)
    await serve_listener(listener, token, handlers, status, allowed_uids=allowed, workspace=root,
                         policy_digest=digest, stop=stop, errors=_errors(handlers), drain=drain,
                         lane_spin_s=spin_s)


def _errors(handlers: Mapping[str, Handler]):  # noqa: ANN202 - service.ErrorMapper | None
    """The runner's mapping of backend errors (FsError, Refused, ...) into Error.data, so the
    server raises them again as they were; none without a runner."""
    if not handlers:
        return None
    from .errors_wire import map_error

    return map_error

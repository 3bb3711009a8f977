"""``codespace serve`` over stdio: answer at once, build the App meanwhile, stop fast.

The wire is served from the first instant: its opening messages before the event loop
exists (:mod:`.stdio_opening`), then everything through the front (:mod:`.front`), while
the App — policy, plugins, tools, store — is built on a worker thread; tool calls wait
for it. The server stops on end of input (once every request received is answered),
SIGINT or SIGTERM: sessions are terminated and the store closed, and the process then
exits without the interpreter's module teardown, which would cost more than the rest of
the shutdown (agents' clients send SIGINT, then SIGTERM 100 ms later, then kill).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import anyio

log = logging.getLogger(__name__)

ENV_DIRECT = "CODESPACE_DIRECT_CALLS"  # "0": every request through the SDK (the reference path)
ENV_LISTING_CACHE = "CODESPACE_LISTING_CACHE"  # "0": build the listing at every start


async def _watch_signals(scope: anyio.CancelScope, caught: list[int]) -> None:
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("signal %d: shutting down", signum)
            caught.append(signum)
            scope.cancel()
            break
    # The shutdown is under way and short: a client's follow-up signal (SIGTERM 100 ms
    # after SIGINT) must not cut it off with the store half closed. (Set after the
    # receiver is closed: closing it restores the default dispositions.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


async def _serve(caught: list[int], start: _Start) -> None:
    import anyio
    import anyio.from_thread
    import anyio.to_thread

    from .bridge import SdkBridge
    from .direct import DirectToolCalls
    from .front import Front
    from .stdio import stdio_transport

    ready = anyio.Event()
    direct = DirectToolCalls(ready) if start.fast else None
    built: dict[str, Any] = {}

    def sdk_server() -> Any:
        from ..server import build_server

        return build_server(built["app"], transport="stdio", run_app=False)

    def build_app() -> Any:
        parts = start.build.result()
        if direct is not None:
            anyio.from_thread.run_sync(direct.tools_known, parts[2], start.build.classic)
        from ..app import App

        return App.assemble(*parts)

    bridge = SdkBridge(None, ready, sdk_server, split_eras=start.fast)  # type: ignore[arg-type]
    front = Front(direct, bridge, start.listing, start.kept)
    for line in start.opening.replay:  # the front takes the state the opening's answers gave
        front.take(line, lambda _answer: None)
    if start.opening.listed is not None:
        front.listed(start.opening.listed)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, tg.cancel_scope, caught)
        async with stdio_transport(front, start.claim, start.opening) as connection:
            app = await anyio.to_thread.run_sync(build_app, abandon_on_cancel=True)
            built["app"] = app
            # What start-up made lives as long as the server: out of the collector's way, which
            # is on again for what serving makes (serve_stdio turned it off).
            gc.freeze()
            gc.enable()
            if direct is not None:
                direct.app = app  # calls wait for ``ready``
            front.check_listing([tool.name for tool in app.registry])
            # The process exits right after the shutdown: what only tidies the disk need not delay it.
            app.processes.detach_cleanups = True
            async with app.running():
                ready.set()
                await connection.finished.wait()
        tg.cancel_scope.cancel()


class _Start:
    """What is done before the event loop: the descriptors claimed, the kept listing looked up,
    the tools' build started, the opening served (:mod:`.stdio_opening`)."""

    def __init__(self, workspace: str | None, policy: str | None, state_dir: str | None) -> None:
        from .listing import ListingCache
        from .stdio_fds import Claim
        from .stdio_opening import Opening, ToolsBuild, serve_opening

        self.fast = os.environ.get(ENV_DIRECT, "1") != "0"
        self.listing: ListingCache | None = None
        self.kept: tuple[bytes, list[str]] | None = None
        if self.fast and os.environ.get(ENV_LISTING_CACHE, "1") != "0":
            self.listing = ListingCache(workspace, policy)
            self.kept = self.listing.load()
        self.claim = Claim()
        self.build = ToolsBuild(workspace, policy, state_dir, listing=self.fast and self.kept is None)
        self.opening = Opening()
        if self.fast:
            self.opening = serve_opening(self.claim, self.kept[0] if self.kept else None, self.build)


def _exit_at_once(signum: int, _frame: object) -> None:
    os._exit(128 + signum)


def serve_stdio(workspace: str | None, policy: str | None, state_dir: str | None) -> int:
    """``codespace serve`` (stdio) until end of input or a signal; exits the process."""
    caught: list[int] = []
    # No cyclic collection while the start-up imports and builds (about a tenth of a start
    # without a kept tool listing, measured); _serve turns it on once the App is built.
    gc.disable()
    # Until the event loop watches them (_watch_signals, the loop's first task), SIGINT and
    # SIGTERM end the process at once: nothing is open that needs closing (the store opens
    # once the App runs), while a KeyboardInterrupt raised in an import or a wait of this
    # thread could leave the interpreter's exit waiting on the tools thread.
    signal.signal(signal.SIGINT, _exit_at_once)
    signal.signal(signal.SIGTERM, _exit_at_once)
    start = _Start(workspace, policy, state_dir)
    import anyio

    anyio.run(_serve, caught, start)
    code = 128 + caught[0] if caught else 0
    # Everything that needed closing is closed (sessions, store, the wire); the
    # interpreter's teardown of a few hundred modules would only delay the exit.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)

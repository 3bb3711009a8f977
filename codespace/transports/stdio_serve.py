"""``codespace serve`` over stdio: answer at once, build the App meanwhile, stop fast.

The wire is served from the first instant (:mod:`.front`), while the App — policy,
plugins, tools, store — is built on a worker thread; tool calls wait for it. The
server stops on end of input (once every request received is answered), SIGINT or
SIGTERM: sessions are terminated and the store closed, and the process then exits
without the interpreter's module teardown, which would cost more than the rest of
the shutdown (agents' clients send SIGINT, then SIGTERM 100 ms later, then kill).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

log = logging.getLogger(__name__)

ENV_DIRECT = "CODESPACE_DIRECT_CALLS"  # "0": every request through the SDK (the reference path)
ENV_LISTING_CACHE = "CODESPACE_LISTING_CACHE"  # "0": build the listing at every start


async def _watch_signals(scope: anyio.CancelScope, caught: list[int]) -> None:
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


async def _serve(workspace: str | None, policy: str | None, state_dir: str | None, caught: list[int]) -> None:
    from .bridge import SdkBridge
    from .direct import DirectToolCalls
    from .front import Front
    from .listing import ListingCache
    from .stdio import stdio_transport

    fast = os.environ.get(ENV_DIRECT, "1") != "0"
    ready = anyio.Event()
    direct = DirectToolCalls(ready) if fast else None
    built: dict[str, Any] = {}

    def sdk_server() -> Any:
        from ..server import build_server

        return build_server(built["app"], transport="stdio", run_app=False)

    def build_app() -> Any:
        from ..app_parts import load_tools

        parts = load_tools(workspace, policy=policy, state_dir=state_dir)
        if direct is not None:
            classic = None
            if front.listing_wanted():
                # Written here, before the rest of the App is built: on another thread the two
                # would share the interpreter's lock, and the client waits for this one.
                from .tool_wire import classic_listing

                classic = classic_listing(list(parts[2]))
            anyio.from_thread.run_sync(direct.tools_known, parts[2], classic)
        from ..app import App

        return App.assemble(*parts)

    bridge = SdkBridge(None, ready, sdk_server, split_eras=fast)  # type: ignore[arg-type]
    cached = fast and os.environ.get(ENV_LISTING_CACHE, "1") != "0"
    front = Front(direct, bridge, ListingCache(workspace, policy) if cached else None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, tg.cancel_scope, caught)
        async with stdio_transport(front) as connection:
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


def serve_stdio(workspace: str | None, policy: str | None, state_dir: str | None) -> int:
    """``codespace serve`` (stdio) until end of input or a signal; exits the process."""
    caught: list[int] = []
    # No cyclic collection while the start-up imports and builds (about a tenth of a start
    # without a kept tool listing, measured); _serve turns it on once the App is built.
    gc.disable()
    anyio.run(_serve, workspace, policy, state_dir, caught)
    code = 128 + caught[0] if caught else 0
    # Everything that needed closing is closed (sessions, store, the wire); the
    # interpreter's teardown of a few hundred modules would only delay the exit.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)

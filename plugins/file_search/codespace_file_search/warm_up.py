"""The warm-up: the workspace walked once shortly after the process that runs find_files
starts, so that the first search finds the walk kept (``walk_index``) instead of paying for it.

Why: the first walk of a 100,000-entry tree costs this Python walker two to three times what
upstream's whole (parallel, native) search costs, and every later search is answered from
the kept walk, mended where inotify says the tree changed. An agent's first search comes
seconds after its client starts the server, so the walk can be done by then. A search that
arrives while the warm-up walks waits for that walk (``WalkIndex.walk`` walks a root once at
a time) rather than walking beside it.

What it costs: one walk of the workspace root under the policy's ``[limits]`` (the same
bounds as a search's, so the walk it keeps is the one a search asks for) and its inotify
watches, paid by every server start, searched or not; a walk that a bound stops is not
kept. The walk sees what a search would: the policy's path rules, applied as they are for
``find_files``. It starts after ``DELAY_S``, so that the client's opening requests are not
slowed by it, and stops when the process shuts down. ``CODESPACE_FIND_FILES_WARM_UP=off`` in
the server's environment turns it off (the first search then walks).
"""

from __future__ import annotations

import os
import threading

DELAY_S = 0.5
SWITCH = "CODESPACE_FIND_FILES_WARM_UP"


def wanted() -> bool:
    return os.environ.get(SWITCH, "on").strip().lower() not in ("off", "0", "no", "false")


async def warm_up(workspace) -> None:  # noqa: ANN001 - codespace WorkspaceView
    import anyio

    from codespace.contract import run_cancellable

    await anyio.sleep(DELAY_S)
    await run_cancellable(lambda cancel: walk_root(workspace, cancel))


def walk_root(workspace, cancel: threading.Event | None = None) -> bool:  # noqa: ANN001
    """Walk the workspace root as ``find_files`` with no ``path`` would, keep the walk and
    build its ranking buffer; whether a walk is now kept for it."""
    from .find_tool import bounds_of
    from .ranking import prepare
    from .walk_index import INDEX

    walked, _ = INDEX.walk(os.path.realpath(workspace.root_str), workspace.paths, bounds_of(workspace), cancel,
                           then=lambda whole: prepare(whole.entries, whole.memo))
    return not walked.cancelled and walked.truncated is None

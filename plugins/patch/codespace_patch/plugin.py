"""The plugin's hooks: the Patcher backend, crash recovery at start-up, doctor checks, the pin check.

Imported whenever plugins load (the server, the helper, ``codespace plugins``), so
it stays light: the backend's modules load when a hook first needs them.
"""

from __future__ import annotations

import os
import sys

from codespace import hookimpl

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True

# The helper process loads this module with the plugins (to choose its file-system backend):
# typing, logging and threading, each loaded where a hook needs it, would cost it more than its patch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from codespace.contract import Backends, WorkspaceView

HELPER = "codespace-apply-patch"


def journal_dir(workspace: WorkspaceView):  # noqa: ANN201 - a Path
    return workspace.patch_journal


@hookimpl
def codespace_patcher(workspace: WorkspaceView) -> Any:
    from .backend import PatchBackend

    return PatchBackend(max_bytes=workspace.limits.max_file_bytes, rules=workspace.paths)


def _run_on_thread(fn):  # noqa: ANN001, ANN202
    """Run a coroutine function to completion from synchronous code.

    The start-up hook is synchronous but may be called inside the server's event
    loop; a private loop on a thread keeps the two apart.
    """
    import anyio

    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["result"] = anyio.run(fn)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc

    import threading

    thread = threading.Thread(target=body, name="codespace-patch-recovery")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


@hookimpl
def codespace_startup(workspace: WorkspaceView, backends: Backends) -> None:
    """Roll back (or finish) an atomic commit a crash interrupted; remove the journal
    files stopped servers left."""
    from .journal_recovery import describe, pending, recover, remove_void_slots

    directory = journal_dir(workspace)
    remove_void_slots(directory)
    if not pending(directory):
        return
    fs = backends.filesystem()
    outcome = _run_on_thread(lambda: recover(fs, directory, workspace.limits.max_file_bytes, workspace.paths))
    text = describe(outcome)
    if text:
        import logging

        logging.getLogger(__name__).warning("apply_patch recovery in %s: %s", directory, text)


@hookimpl
def codespace_pin_checks() -> list:
    from .pin import pin_checks

    return pin_checks()


@hookimpl
def codespace_doctor(workspace: WorkspaceView) -> list:
    from codespace.contract import Check

    from .journal_recovery import pending

    checks = []
    beside = os.path.join(os.path.dirname(sys.executable), HELPER)  # the server's own environment first
    import shutil  # here: the helper process loads this module, and shutil's archive codecs cost it ~3 ms

    helper = beside if os.access(beside, os.X_OK) else shutil.which(HELPER)
    checks.append(Check(
        "patch helper", helper is not None, helper or f"{HELPER} is neither beside {sys.executable} nor on PATH",
        "" if helper else "reinstall codespace-patch (pip install ./plugins/patch) in the server's environment",
    ))
    left = pending(journal_dir(workspace))
    checks.append(Check(
        "patch journal", not left,
        "no interrupted atomic patch" if not left else f"{len(left)} journal(s) in {journal_dir(workspace)}",
        "" if not left else "start the server once: it rolls interrupted patches back at start-up",
    ))
    return checks

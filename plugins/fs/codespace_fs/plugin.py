"""The hooks: the FileSystem backend for a workspace, and what ``codespace doctor`` shows."""

from __future__ import annotations

import errno
import os

from codespace import hookimpl

from . import kernel
from .resolve import MODE_ENV, choose_mode

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True

# Not typing's TYPE_CHECKING, nor functools.cache and a module logger below: the patch helper
# loads this module to get its backend, and typing, functools and logging cost it more than its patch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from codespace.contract import Check, WorkspaceView

    from .backend import FsBackend
    from .resolve import Mode

_MODES: dict[str | None, tuple[Mode, str]] = {}


def _mode(requested: str | None) -> tuple[Mode, str]:
    """The resolution mode for ``requested``, chosen (and logged) once per value."""
    chosen = _MODES.get(requested)
    if chosen is None:
        chosen = _MODES[requested] = choose_mode(requested)
        if _info_enabled():
            import logging

            logging.getLogger(__name__).info("codespace-fs: path resolution by %s (%s)", *chosen)
    return chosen


def _info_enabled() -> bool:
    """Would an INFO record of this module be shown? Only when logging is loaded (a server
    configures it at start-up; a process that never loaded it has no handler to show it)."""
    import sys

    logging = sys.modules.get("logging")
    return logging is not None and logging.getLogger(__name__).isEnabledFor(logging.INFO)


@hookimpl
def codespace_filesystem(workspace: WorkspaceView) -> FsBackend:
    from .backend import FsBackend

    mode, _ = _mode(os.environ.get(MODE_ENV))
    return FsBackend(workspace, mode)


@hookimpl
def codespace_doctor(workspace: WorkspaceView) -> list[Check]:
    from codespace.contract import Check

    available, why = kernel.openat2_available()
    mode, reason = _mode(os.environ.get(MODE_ENV))
    checks = [
        Check(
            "fs openat2", available, why,
            "" if available else "Linux >= 5.6 gives openat2; the component-by-component fallback is in use and is "
            "as strict, one syscall per path component slower",
        ),
        Check("fs resolution", True, f"{mode}: {reason}"),
    ]
    try:
        fd = os.open(str(workspace.root), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.readlink(f"/proc/self/fd/{fd}")
            proc_ok, proc_detail = True, "/proc/self/fd readable (links followed inside the root are re-checked)"
        finally:
            os.close(fd)
    except OSError as exc:
        proc_ok, proc_detail = False, f"/proc/self/fd unusable: {exc.strerror}"
    checks.append(Check(
        "fs /proc/self/fd", proc_ok, proc_detail,
        "" if proc_ok else "mount /proc; without it links are refused in openat2 mode and reads re-open by name",
    ))
    try:
        kernel.renameat2(-100, b"/nonexistent-codespace-probe", -100, b"/nonexistent-codespace-probe2",
                         kernel.RENAME_NOREPLACE)
    except OSError as exc:
        rn_ok = exc.errno == errno.ENOENT
        checks.append(Check(
            "fs renameat2", rn_ok, "RENAME_NOREPLACE available" if rn_ok else f"renameat2: {exc.strerror}",
            "" if rn_ok else "moves without overwrite fall back to check-then-rename",
        ))
    checks.append(Check(
        "fs symlink policy", True, f"filesystem.symlinks = {workspace.policy.filesystem.symlinks!r}",
    ))
    return checks


@hookimpl
def codespace_pin_checks():  # noqa: ANN201
    from .pin_compare import PIN_CHECK  # loads only in pin-check runs, never in the server

    return [PIN_CHECK]

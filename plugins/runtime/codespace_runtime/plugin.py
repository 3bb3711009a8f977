"""Hooks of the runtime plugin: the runner (backends that forward to a worker), the service
that starts the child worker with the server and stops it at shutdown, and doctor checks.

The core decides whether a worker is used (``[runtime] worker``) and asks ``codespace_runner``
only when it is; this plugin implements the mode it is told. In the worker process itself the
worker's entry (:func:`codespace_runtime.runner.handlers_for`) calls
:func:`codespace_runtime.role.mark_worker_process` first, and the runner hook then answers None: there, the plugin is
the runner and must not forward again.
"""

from __future__ import annotations

from codespace import hookimpl

from .role import in_worker_process

# Every hook below is defined unconditionally: a one-shot helper may keep which hooks this
# module has while its package's files are unchanged (codespace.contract.helper_plugins).
CODESPACE_STATIC_HOOKS = True

# Every process that loads plugins imports this module, one-shot helpers included (the patch
# helper, to choose its file-system backend): json, logging and typing load where used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from codespace.contract import Backends, Check, WorkspaceView


@hookimpl
def codespace_runner(workspace: WorkspaceView, local: Backends) -> Any:
    if in_worker_process():
        return None
    from .lifecycle import ChildWorker, DaemonAttachment
    from .remote import RemoteBackends

    mode = workspace.policy.runtime.worker
    worker = {"child": ChildWorker, "daemon": DaemonAttachment}.get(mode)
    if worker is None:
        return None
    return RemoteBackends(worker(workspace), local)


def _worker_of(backends: Backends) -> Any:
    from codespace.contract import ToolError

    from .lifecycle import Worker

    try:
        fs = backends.filesystem()
    except ToolError:
        return None
    worker = getattr(fs, "worker", None)
    return worker if isinstance(worker, Worker) else None


@hookimpl
def codespace_services(workspace: WorkspaceView, backends: Backends, store: Any) -> list | None:
    """Start the worker with the server (so the first call does not wait for it) and stop it
    when the server shuts down."""
    if in_worker_process():
        return None
    worker = _worker_of(backends)
    if worker is None:
        return None

    async def keep_worker() -> None:
        import anyio

        from codespace.contract import ToolError

        try:
            try:
                await worker.client()
            except ToolError as exc:  # said again by the first call, and in workspace_info
                import logging

                logging.getLogger(__name__).error("codespace-runtime: %s", exc.message)
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await worker.stop()

    return [keep_worker]


@hookimpl
def codespace_pin_checks() -> list:
    from .pin_check import checks  # the check's modules load only for `codespace pins check`

    return checks()


@hookimpl
def codespace_doctor(workspace: WorkspaceView) -> list[Check]:
    from codespace.contract import Check

    mode = workspace.policy.runtime.worker
    if mode == "off":
        return [Check("runtime worker", True, "off: file operations, patches and commands run in the server "
                      "(set [runtime] worker = \"child\" or \"daemon\" for a separate, hardened worker)")]
    last = _last_status(workspace)  # read before the probe below starts a worker of its own
    checks = [_live_check(workspace, mode)]
    if last is not None:
        failure = last.get("last_failure")
        checks.append(Check(
            "runtime worker (last server)", failure is None,
            f"server pid {last.get('server_pid')}: {last.get('state')}, worker pid {last.get('pid')}, "
            f"{last.get('starts')} start(s)" + (f"; last failure: {failure}" if failure else ""),
            "" if failure is None else "see the server's log; the server starts a new child worker at the next call",
        ))
    return checks


def _live_check(workspace: WorkspaceView, mode: str) -> Check:
    """Start (child) or reach (daemon) a worker for the workspace and ask for its status."""
    import asyncio

    from codespace.contract import Check, ToolError

    from .lifecycle import ChildWorker, DaemonAttachment

    worker = (ChildWorker if mode == "child" else DaemonAttachment)(workspace, record=False)

    async def probe() -> dict:
        try:
            return await worker.call("status", {}, "status")
        finally:
            await worker.stop()

    try:
        status = asyncio.run(probe())
    except ToolError as exc:
        return Check("runtime worker", False, f"{mode}: {exc.message}",
                     "install codespace-runtime in the server's environment" if mode == "child"
                     else f"codespace-worker start --workspace {workspace.root}")
    return Check("runtime worker", True,
                 f"{mode}: worker pid {status.get('pid')} answers on protocol 5 and serves "
                 f"{', '.join(status.get('serves', []))}; commands run in the {status.get('commands', 'server')}")


def _last_status(workspace: WorkspaceView) -> dict | None:
    import json

    from .lifecycle import STATUS_FILE

    path = workspace.state_dir / "worker" / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

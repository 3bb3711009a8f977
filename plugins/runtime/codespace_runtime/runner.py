"""The worker's runner: file operations and patches for one workspace, served over protocol 5.

Built in the worker process from the workspace as the operator configured it (the policy file
and state directory the server was started with, given on the worker's command line or
environment, never over the socket), with the same plugins a server would load. Every request
is judged again against that policy before a backend sees it, with the gateway's own functions
(``codespace.contract.gate``): a request the server should not have sent is refused here.

Command sessions (``proc.*``) are served by :mod:`codespace_runtime.runner_sessions` on a
registry of this process: the worker owns the commands it starts.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from codespace.contract import (
    BackendMissing, ListDirRequest, MakeDirRequest, MoveRequest, PatchRequest, ReadFileRequest, RemoveRequest,
    StatRequest, ToolError, WalkRequest, WriteFileRequest, gate, hosting,
)
import anyio
from pydantic import ValidationError

from .role import mark_worker_process
from .errors_wire import NotRun
from .framing import close_all as _close
from .hardening import UMASK_ENV
from .judging import Judge
from .runner_sessions import session_handlers

Handler = Callable[[dict, list[int]], Awaitable[dict]]
POLICY_ENV = "CODESPACE_WORKER_POLICY"
"""The policy file the server was started with (child mode: set by the server that starts the worker)."""
SERVES = ["files", "patch", "commands"]
STOP_GRACE_S = 0.02
"""At the worker's stop, SIGTERM to every command, then SIGKILL after this long (the server's own grace)."""

# method -> (request model, backend method, {field: need}); needs as the file tools declare them.
_MODEL_METHODS: dict[str, tuple[type, str, dict[str, str]]] = {
    "fs.read_file": (ReadFileRequest, "read_file", {"path": "read"}),
    "fs.write_file": (WriteFileRequest, "write_file", {"path": "write"}),
    "fs.list_dir": (ListDirRequest, "list_dir", {"path": "read"}),
    "fs.walk": (WalkRequest, "walk", {"path": "read"}),
    "fs.stat": (StatRequest, "stat", {"path": "read"}),
    "fs.make_dir": (MakeDirRequest, "make_dir", {"path": "write"}),
    "fs.move": (MoveRequest, "move", {"source": "write", "destination": "write"}),
    "fs.remove": (RemoveRequest, "remove", {"path": "write"}),
}


def policy_digest(path: os.PathLike[str] | str | None) -> str | None:
    """sha256 of the policy file's bytes (None without one): what both sides compare."""
    if path is None:
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _parse(model: type, params: dict, method: str) -> Any:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(params)"
        raise NotRun(ToolError(f"{method} refused by the worker: params.{where}: {first['msg']}",
                               code="bad_params")) from None


class _Backend:
    """A backend looked up at each use: a worker without codespace-fs (or -patch) still starts
    and answers each call with the core's "install ..." error, not run (``dispatched: false``)."""

    def __init__(self, get: Callable[[], Any]) -> None:
        self._get = get

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._get(), name)
        except BackendMissing as exc:
            raise NotRun(exc) from None


def _model_handler(fs: Any, judge: Judge, method: str, spec: tuple[type, str, dict[str, str]]) -> Handler:
    model, name, needs = spec

    async def handle(params: dict, fds: list[int]) -> dict:
        _close(fds)
        request = _parse(model, params, method)
        judge.request(request, needs)
        result = await getattr(fs, name)(request)
        return result.model_dump(mode="json")

    return handle


def _raw_handlers(fs: Any, judge: Judge) -> dict[str, Handler]:
    """The raw calls a patcher makes, for any other user of the FileSystem contract."""

    def arg(params: dict, name: str, kind: type, default: Any = ...) -> Any:
        value = params.get(name, default)
        if value is ... or type(value) is not kind:
            raise NotRun(ToolError(f"the worker needs params.{name} ({kind.__name__})", code="bad_params"))
        return value

    async def read_bytes(params: dict, fds: list[int]) -> dict:
        _close(fds)
        path, follow = arg(params, "path", str), arg(params, "follow_symlink", bool, False)
        judge.paths(read=(path,))
        data = await fs.read_bytes(path, max_bytes=arg(params, "max_bytes", int), follow_symlink=follow)
        return {"data": base64.b64encode(data).decode("ascii")}

    async def write_bytes(params: dict, fds: list[int]) -> dict:
        _close(fds)
        path, follow = arg(params, "path", str), arg(params, "follow_symlink", bool, False)
        judge.paths(**({"write_through": (path,)} if follow else {"write": (path,)}))
        try:
            data = base64.b64decode(arg(params, "data", str), validate=True)
        except ValueError:
            raise NotRun(ToolError("the worker needs params.data as base64", code="bad_params")) from None
        await fs.write_bytes(path, data, follow_symlink=follow, create_parents=arg(params, "create_parents", bool, False),
                             durable=arg(params, "durable", bool, True), in_place=arg(params, "in_place", bool, False))
        return {}

    async def delete_file(params: dict, fds: list[int]) -> dict:
        _close(fds)
        path = arg(params, "path", str)
        judge.paths(write=(path,))
        await fs.delete_file(path)
        return {}

    async def kind(params: dict, fds: list[int]) -> dict:
        _close(fds)
        path = arg(params, "path", str)
        judge.paths(read=(path,))
        return {"kind": await fs.kind(path)}

    async def sync(params: dict, fds: list[int]) -> dict:
        _close(fds)
        await fs.sync()
        return {}

    return {"fs.read_bytes": read_bytes, "fs.write_bytes": write_bytes, "fs.delete_file": delete_file,
            "fs.kind": kind, "fs.sync": sync}


def _patch_handler(workspace: Any, backends: Any, judge: Judge) -> Handler:
    async def apply(params: dict, fds: list[int]) -> dict:
        _close(fds)
        request = _parse(PatchRequest, params, "patch.apply")
        judge.path(request.cwd)
        try:
            patcher, fs = backends.patcher(), backends.filesystem()
        except BackendMissing as exc:
            raise NotRun(exc) from None
        try:
            plan = patcher.plan(request.patch, request.cwd)
        except ToolError as exc:  # it does not parse: nothing ran
            raise NotRun(exc) from None
        refusal = gate.patch_targets_refusal(workspace, plan.targets)
        if refusal is not None:
            raise NotRun(refusal)
        workspace.ensure_state_dir()
        result = await patcher.apply(request, fs, workspace.patch_journal)
        return result.model_dump(mode="json")

    return apply


def _tool_handler(host: Any) -> Handler:
    """``tool.run``: a plugin's tool that acts on the workspace itself (``runs_on_workspace``),
    judged again and run here."""

    async def run(params: dict, fds: list[int]) -> dict:
        _close(fds)
        name, args, operation_id = params.get("name"), params.get("args", {}), params.get("operation_id")
        if not isinstance(name, str) or not isinstance(args, dict) or not (operation_id is None or isinstance(operation_id, str)):
            raise NotRun(ToolError("tool.run needs params {name: str, args: object, operation_id: str|null}",
                                   code="bad_params"))
        try:
            prepared = host.prepare(name, args, operation_id)
        except ToolError as exc:  # refused or not runnable here: nothing ran
            raise NotRun(exc) from None
        return await host.run(prepared)

    return run


def _agent_umask(value: str | None) -> None:
    """Take the agent's umask (``UMASK_ENV``: the server's in child mode, the daemon's start-up
    umask otherwise) for what the backends create for the agent, so a file written through the
    worker gets the mode it gets in-process (the hardening's 077 would make every new file
    0600). The worker's own files do not depend on it: the token is only read, the socket is
    bound under an explicit 077, journal and state files have explicit modes."""
    if not value:
        return
    try:
        mask = int(value, 8)
    except ValueError:
        raise gate.WorkspaceError(f"{UMASK_ENV}={value!r} is not an octal umask (e.g. 022)") from None
    if not 0 <= mask <= 0o777:
        raise gate.WorkspaceError(f"{UMASK_ENV}={value!r} is not an octal umask (e.g. 022)")
    os.umask(mask)


def handlers_for(
    root: str, *, policy: str | None = None, state_dir: str | None = None,
) -> tuple[Mapping[str, Handler], Callable[[], dict], Callable[[], Any]]:
    """The worker's handlers for the workspace at ``root``, its ``status`` callable, and its
    lifespan (``async with lifespan():`` around serving: the command registry's life).

    ``policy``: the operator's policy file (default: ``$CODESPACE_WORKER_POLICY``, else the
    workspace's ``.codespace/policy.toml``); ``state_dir``: default ``$CODESPACE_STATE_DIR`` or
    the default state directory. This is the worker's entry into the runner: it tells the
    runtime plugin that this process is the worker, so the plugin does not forward again."""
    mark_worker_process()
    _agent_umask(os.environ.get(UMASK_ENV))
    policy = policy if policy is not None else (os.environ.get(POLICY_ENV) or None)
    workspace = gate.open_workspace(root, policy_path=policy, state_dir=state_dir)
    backends, failed = gate.backends(workspace)
    fs = _Backend(backends.filesystem)
    judge = Judge(workspace)
    handlers: dict[str, Handler] = {m: _model_handler(fs, judge, m, spec) for m, spec in _MODEL_METHODS.items()}
    handlers.update(_raw_handlers(fs, judge))
    handlers["patch.apply"] = _patch_handler(workspace, backends, judge)
    proc_handlers, registry, records = session_handlers(workspace, backends)
    handlers.update(proc_handlers)
    handlers["tool.run"] = _tool_handler(hosting.tool_host(workspace, backends))
    digest = policy_digest(workspace.policy_path)
    providers = getattr(backends, "providers", dict)()

    def status() -> dict:
        return {
            "workspace": str(workspace.root), "policy_digest": digest, "serves": SERVES, "commands": "worker",
            "sessions": len(registry.sessions()),
            "process_tracking": registry.tracker.report(),
            "backends": {k: providers.get(k) for k in ("filesystem", "patcher")}, "plugin_failures": failed,
        }

    async def drain() -> None:
        await registry.shutdown(STOP_GRACE_S)

    @contextlib.asynccontextmanager
    async def lifespan() -> Any:
        # The plugins' services for the mechanisms this process holds (the sandbox's warm helper
        # and egress proxy), around the registry as in the server: they outlive every command.
        async with anyio.create_task_group() as services:
            for service in hosting.services(workspace, backends, records):
                services.start_soon(service)
            async with registry.running():
                try:
                    yield drain
                finally:
                    with anyio.CancelScope(shield=True):  # the worker stops: its commands end with it, quickly
                        await registry.shutdown(STOP_GRACE_S)
            services.cancel_scope.cancel()

    return handlers, status, lifespan

"""workspace_info: roots, effective policy, plugins, sandbox engine, limits."""

import os
from typing import Any

from pydantic import Field

from .. import __version__
from ..models import Model, Strict
from ..plugins import hookimpl
from ..tooling import ToolCall, ToolDefinition, ToolRegistrar

PROTOCOLS = {"sandbox_handshake": 1}
WORKER_PROTOCOL_KEY = "worker_socket"  # added only while a worker is serving (its protocol, 5)


class WorkspaceInfoArgs(Strict):
    pass


class PathRuleView(Model):
    path: str
    access: str
    source: str


class WorkspaceInfo(Model):
    server: dict[str, Any] = Field(description="CodeSpace version and protocol versions.")
    root: str = Field(description="Workspace root; relative paths resolve against it.")
    writable_roots: list[str]
    path_rules: list[PathRuleView] = Field(description="Most specific entry wins; ties go to the more restrictive.")
    protected: list[str] = Field(description="Read-only inside writable roots (names at any depth, '/x' anchored).")
    symlinks: str
    network: dict[str, Any]
    sandbox: dict[str, Any] = Field(description="Policy mode, engine in use, Landlock ABI, what cannot be enforced; "
                                    "process_tracking: how a command's processes are tracked, and whether an "
                                    "unsandboxed one's are limited (of the worker when commands run there).")
    commands: dict[str, Any]
    env: dict[str, Any]
    limits: dict[str, Any]
    plugins: list[dict[str, Any]]
    backends: dict[str, str | None] = Field(description="Which plugin serves each backend (null: none installed).")
    runtime: dict[str, Any] = Field(
        description="Where side effects run: worker 'off' (this server), 'child' or 'daemon'; what the worker "
        "serves (files, patch, commands), its pid and protocol, and whether it is serving or died; 'commands' says "
        "where command sessions run ('server' or 'worker').",
    )


def _sandbox_section(call: ToolCall) -> dict[str, Any]:
    policy = call.workspace.policy.sandbox
    section: dict[str, Any] = {"mode": policy.mode, "engine_preference": policy.engine}
    from .. import kernel  # ctypes, platform, subprocess: not needed to list the tool

    landlock = kernel.landlock_abi()
    section["landlock_abi"] = landlock.value
    backend = call.backends.sandbox()
    if backend is None:
        section.update(engine=None, available=False, detail="no sandbox plugin is installed (codespace-linux-sandbox)")
    else:
        section.update(backend.info().model_dump())
    if policy.mode == "off":
        # Found by testing from outside: the engine's sentence ("never host root") was all it said,
        # while a root server ran every command as root.
        if call.backends.commands_remote():
            who = "the worker's user"
        elif os.geteuid() == 0:
            who = "root, with every power of host root"
        else:
            who = f"the server's own uid {os.geteuid()}"
        section["detail"] = (f"sandbox.mode = 'off': commands run unsandboxed, as {who}. The engine, which no "
                             f"command uses: {section.get('detail', '')}")
    section["process_tracking"] = _process_tracking(call)
    return section


def _process_tracking(call: ToolCall) -> dict[str, Any]:
    """How a command's processes are found again to be killed, and whether an unsandboxed
    one's are limited: the tracker of the process the commands run in (a worker reports its own)."""
    if call.backends.commands_remote():
        reported = call.backends.runtime().get("process_tracking")
        if reported is not None:
            return reported
        return {"mechanism": None, "detail": "the worker that runs the commands is not serving yet; its own "
                "tracking is shown once it is", "unsandboxed_process_limit": None}
    if call.processes is None:
        return {"mechanism": None, "detail": "this server runs no commands", "unsandboxed_process_limit": None}
    return call.processes.tracker.report()


async def workspace_info(call: ToolCall, args: WorkspaceInfoArgs) -> WorkspaceInfo:
    ws = call.workspace
    policy = ws.policy
    runtime = call.backends.runtime()
    protocols = dict(PROTOCOLS)
    if runtime.get("serving") and runtime.get("protocol") is not None:
        protocols[WORKER_PROTOCOL_KEY] = runtime["protocol"]
    return WorkspaceInfo(
        server={"name": "codespace", "version": __version__, "protocols": protocols},
        root=str(ws.root),
        writable_roots=ws.paths.writable_roots(),
        path_rules=[PathRuleView(path=r.path, access=r.access, source=r.source) for r in ws.paths.rules],
        protected=policy.filesystem.all_protected(),
        symlinks=policy.filesystem.symlinks,
        network=policy.network.model_dump(),
        sandbox=_sandbox_section(call),
        commands={
            "default": policy.commands.default,
            "shell": policy.commands.shell,
            "opaque_shell": policy.commands.opaque_shell,
            "rules": [r.model_dump() for r in policy.commands.rules],
        },
        env={"inherit": policy.env.inherit, "exclude": policy.env.exclude, "set": sorted(policy.env.set),
             "include_only": policy.env.include_only, "ignore_default_excludes": policy.env.ignore_default_excludes},
        limits=policy.limits.model_dump(),
        plugins=[p.as_dict() for p in call.plugins.listing()],
        backends=call.backends.providers(),
        runtime=runtime,
    )


@hookimpl
def codespace_register_tools(register: ToolRegistrar) -> None:
    register(ToolDefinition(
        name="workspace_info",
        description="Describe this workspace: its root (relative paths resolve against it), which paths are "
        "readable or writable and why, protected paths, network and sandbox settings (engine, Landlock ABI, what "
        "cannot be enforced), command rules, limits, and the plugins serving each backend: what can I access "
        "and do here. Call it first.",
        arguments=WorkspaceInfoArgs, result=WorkspaceInfo, handler=workspace_info, read_only=True,
    ))

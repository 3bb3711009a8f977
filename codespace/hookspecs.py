"""Hook specifications: the contract between the CodeSpace host and its plugins.

A plugin is a module (or object) registered under the entry-point group
``codespace.plugins`` whose functions are marked with :data:`codespace.hookimpl`.
Hooks are synchronous; what they return (backends, tools) exposes ``async``
methods that the server awaits. Everything a hook receives or returns is a type
of :mod:`codespace.contract`, the plugin API.

Each hook says where it runs (``Runs in``: the server, ``codespace doctor``, the
patch helper ``codespace-apply-patch``, other CLI commands), how often, and since
which version of ``codespace`` it has its current form (``Version``).

Hooks that *provide a backend* are ``firstresult``: the first non-None result wins,
so a plugin that cannot serve a workspace (missing kernel feature, wrong platform)
returns None and lets the next one answer.

The host never calls ``pm.hook.*`` outside :mod:`codespace.plugins`; the rest of the
core goes through the typed facade :class:`codespace.plugins.Plugins`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .contract import (Backends, Check, FileSystem, NetworkAudit, Patcher, PinCheck, Sandbox, Terminal,
                           WorkspaceView)
    from .tooling import ToolRegistrar

    Service = Callable[[], Awaitable[None]]

hookspec = pluggy.HookspecMarker("codespace")

# -------------------------------------------------------------------------
# Start-up
# -------------------------------------------------------------------------


@hookspec
def codespace_startup(workspace: WorkspaceView, backends: Backends) -> None:
    """Prepare the plugin for serving ``workspace``; recover from an earlier crash.

    Called once when a server starts on a workspace, after the operation store has
    marked the operations of a dead server ``interrupted`` and before the first
    tool call is accepted. Use it to finish or roll back work a crash left behind
    (for example a patch journal in ``workspace.state_dir``). Keep it fast: server
    readiness waits for it.

    :param workspace: The workspace about to be served.
    :param backends: The workspace's backends (:class:`codespace.contract.Backends`),
        e.g. the file system to roll a half-applied change back through.

    Runs in: the server, once per served workspace, before it is ready.
    Version: 0.1; ``backends`` is typed as the contract's ``Backends`` since 0.2.

    .. note:: An exception raised here is reported and disables nothing else; the
       plugin's backends are still offered.
    """


@hookspec
def codespace_services(workspace: WorkspaceView, backends: Backends, store: NetworkAudit) -> list[Service] | None:
    """Provide long-running async services (e.g. an egress proxy).

    Called once at server start, after :func:`codespace_startup`. Each service is an
    ``async`` callable taking no arguments, run in the server's task group until
    shutdown, when it is cancelled. A service that raises is logged and stopped;
    the server goes on.

    :param workspace: The workspace being served.
    :param backends: The workspace's backends; ``backends.sandbox_decision()`` says
        whether the core confines commands with this plugin's sandbox (a service
        that only serves confined commands checks it instead of deciding itself).
    :param store: Where network decisions are recorded
        (:class:`codespace.contract.NetworkAudit`: ``record_network``).
    :return: A list of async callables, or None.

    Runs in: the server, once per served workspace, after ``codespace_startup``; with
    ``[runtime] worker`` set, also in the worker, around its command registry, with the
    worker's backends and a ``store`` that forwards network decisions to the server. A
    server whose commands run in a worker passes backends whose ``sandbox()`` is None:
    the sandbox's services belong where its commands run.
    Version: 0.1; ``store`` is typed as ``NetworkAudit`` since 0.2; called in the worker
    since 0.2.1 (additive).
    """


@hookspec
def codespace_doctor(workspace: WorkspaceView) -> list[Check] | None:
    """Report environment checks for ``codespace doctor``.

    :param workspace: The workspace being diagnosed (its policy may be the default).
    :return: A list of :class:`codespace.contract.Check`, one per thing the plugin
        depends on (a kernel feature, an executable), each with a hint that tells an
        operator how to fix a problem.

    Runs in: ``codespace doctor`` (its own process, never the server), once per run.
    Version: 0.1; ``Check`` lives in ``codespace.contract`` since 0.2.
    """


@hookspec
def codespace_pin_checks() -> list[PinCheck] | None:
    """Offer the plugin's conformance checks against its pinned upstream release.

    :return: One :class:`codespace.contract.PinCheck` per upstream component the plugin
        follows. Each drives that release's own ``codex`` binary (handed to it in the
        :class:`codespace.contract.PinCheckRequest`) and ours on the same inputs, and
        returns a :class:`codespace.contract.PinReport`; deliberate differences are
        reported with the reason the plugin documents.

    Runs in: ``codespace pins check`` and the plugin's ``pin_check.py`` (their own
    processes, never the server), once per run; checks run one after another.
    Version: 0.2.
    """


# -------------------------------------------------------------------------
# Backends
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def codespace_filesystem(workspace: WorkspaceView) -> FileSystem | None:
    """Provide the file-system backend for ``workspace``.

    The backend performs the file tools (``read_file``, ``write_file``, ``list_dir``,
    ``walk``, ``stat``, ``make_dir``, ``move``, ``remove``) and the raw file access
    the patch backend needs. The gateway has already checked each path against the
    policy; the backend must make the *use* of the path safe (no-follow, confined
    to the allowed root, race-free).

    :param workspace: The workspace to serve.
    :return: An object implementing :class:`codespace.contract.FileSystem`, or None
        to let another plugin answer.

    Runs in: the server (once per workspace, when a backend is first needed, then
    cached), the patch helper ``codespace-apply-patch`` (once per run) and
    ``codespace doctor`` (to name the provider).
    Version: 0.1.

    .. note:: Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def codespace_patcher(workspace: WorkspaceView) -> Patcher | None:
    """Provide the patch backend (``apply_patch``) for ``workspace``.

    The patcher reads and writes files only through the :class:`FileSystem`
    backend the host hands to each call, never through ``open()`` on agent paths.

    :param workspace: The workspace to serve.
    :return: An object implementing :class:`codespace.contract.Patcher`, or None.

    Runs in: the server (once per workspace, at the first ``apply_patch``, then
    cached) and ``codespace doctor``.
    Version: 0.1.

    .. note:: Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def codespace_terminal(workspace: WorkspaceView) -> Terminal | None:
    """Provide the terminal backend used for ``exec(tty=true)`` sessions.

    :param workspace: The workspace to serve.
    :return: An object implementing :class:`codespace.contract.Terminal`, or None.

    Runs in: the server (once per workspace, at the first ``exec(tty=true)``, then
    cached) and ``codespace doctor``.
    Version: 0.1.

    .. note:: Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def codespace_sandbox(workspace: WorkspaceView) -> Sandbox | None:
    """Provide the sandbox backend that wraps command specs for ``workspace``.

    The host asks the sandbox to wrap every command it spawns when the policy
    calls for a sandbox (``sandbox = "auto"`` with a restrictive policy, or
    ``"required"``).

    :param workspace: The workspace to serve.
    :return: An object implementing :class:`codespace.contract.Sandbox`, or None.
        A backend whose engines do not work on this host should still be returned,
        with ``info().available`` false and the reason in ``info().detail``, so the
        host can say why commands run unsandboxed (or refuse them when the policy
        requires a sandbox). The core, not the backend, decides whether it is used
        (``Backends.sandbox_decision``); ``info().engines`` lists the engine names
        ``sandbox.engine`` may choose.

    Runs in: the server (once per workspace, then cached) and ``codespace doctor``.
    Version: 0.1; ``SandboxInfo.engines`` since 0.2.

    .. note:: Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def codespace_runner(workspace: WorkspaceView, local: Backends) -> Backends | None:
    """Provide backends that perform the workspace's side effects in another process.

    Asked only when the policy's ``[runtime] worker`` is not ``"off"`` (the core decides
    whether a worker is used; the plugin implements the mode it finds there). A plugin
    that performs the workspace's side effects in another process returns backends that
    forward to it; what it does not forward it answers from ``local``. The core takes
    ``filesystem()`` and ``patcher()`` from the result, and, when the result has
    ``sessions(records) -> CommandSessions``, runs the command tools there (the worker then
    builds, judges, sandboxes and tracks the commands; ``records``, the core's
    ``SessionRecords``, takes their starts and ends into the operation store). An optional
    ``adopt()`` on those sessions returns the operations a worker still runs for a server that
    has gone (``running``) and those that ended meanwhile (``ended``, already written to
    ``records`` by ``adopt``); the core keeps all of them out of its recovery instead of
    marking them interrupted. The result may
    also have ``status() -> dict`` (JSON values: ``worker``, ``serving``, ``protocol``,
    ``serves``, ``commands``, ...), which ``workspace_info`` shows as ``runtime``.

    Inside the worker process the plugin must return None: it *is* the runner there, and
    its own entry point tells it so.

    :param workspace: The workspace to serve.
    :param local: The in-process backends (the other backend hooks' answers), for what
        is not forwarded.
    :return: An object implementing :class:`codespace.contract.Backends`, or None (the
        side effects run in the server process).

    Runs in: the server, once per workspace, when a backend is first needed.
    Version: 0.2; command sessions (``sessions``, ``adopt``) since 0.2.1 (additive).

    .. note:: Stops at the first non-None result.
    """


# -------------------------------------------------------------------------
# Tools
# -------------------------------------------------------------------------


@hookspec
def codespace_register_tools(register: ToolRegistrar) -> None:
    """Add MCP tools.

    Call ``register(tool)`` with a :class:`codespace.tooling.ToolDefinition` for
    each tool. Every tool passes through the gateway like the built-in ones: its
    arguments are validated, the paths and commands it declares are checked
    against the policy, and side-effecting tools get an operation record. A tool
    name already taken is reported as a plugin error and the later tool is
    dropped.

    :param register: Callable taking one :class:`codespace.contract.ToolDefinition`.

    Runs in: every process that assembles a server (the server itself, ``codespace
    plugins``, ``codespace doctor``), once per process, before a workspace is served.
    Version: 0.1.
    """

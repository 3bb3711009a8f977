"""The plugin API: everything a plugin may use of the core, in CodeSpace's own types.

A plugin imports only from ``codespace.contract`` (and its submodules) and takes
``codespace.hookimpl`` to mark its hooks; every other module of ``codespace`` is
internal and may change in any release (``tests/test_plugin_api.py`` fails when a
plugin under ``plugins/`` imports one). No plugin type crosses this line: a plugin
converts these models to whatever its mechanism needs.

Stability: the names in ``__all__`` are stable within a major version of the
``codespace`` distribution. Adding a name, an optional field or an optional backend
method is a minor release; removing or renaming one, or changing what a field means,
is a major release and is noted in the README's hook table. Plugins declare the range
they support as a ``codespace`` requirement in their package metadata.

Names load on first use, so that one-shot helper processes (the patch helper, the
sandbox helper) pay only for what they touch.
"""

# name -> module that defines it (relative to this package, or absolute in the core)
_EXPORTS = {
    # errors: what a backend raises for the agent to act on
    "ToolError": ".errors", "FsError": ".errors", "Refused": ".errors", "BackendMissing": ".errors",
    "RunnerLost": ".errors",
    # the workspace and the core's decisions, as plugins see them
    "WorkspaceView": ".workspace", "Backends": ".backends", "SandboxDecision": ".backends",
    "Policy": "codespace.policy.model", "Limits": "codespace.policy.model",
    "FilesystemPolicy": "codespace.policy.model", "NetworkPolicy": "codespace.policy.model",
    "SandboxPolicy": "codespace.policy.model", "PathRules": "codespace.policy.paths",
    "normalize": "codespace.policy.paths", "TooLongAWay": "codespace.policy.paths",
    # doctor
    "Check": ".checks",
    # commands and terminals
    "CommandSpec": ".commands", "Terminal": ".commands", "TerminalProcess": ".commands",
    "CommandSessions": ".commands", "SessionRecords": ".commands",
    # sandbox
    "LaunchedProcess": ".sandbox", "Sandbox": ".sandbox", "SandboxFastPath": ".sandbox", "SandboxCleanup": ".sandbox", "SandboxInfo": ".sandbox", "SandboxLayout": ".sandbox",
    # files
    "DirEntry": ".files", "EntryError": ".files", "FileKind": ".files", "FileSystem": ".files",
    "InvalidUtf8": ".files", "ListDirRequest": ".files", "ListDirResult": ".files", "MakeDirRequest": ".files",
    "MakeDirResult": ".files", "MoveRequest": ".files", "MoveResult": ".files", "ReadFileRequest": ".files",
    "ReadFileResult": ".files", "RemoveRequest": ".files", "RemoveResult": ".files", "StatRequest": ".files",
    "StatResult": ".files", "WalkEntry": ".files", "WalkRequest": ".files", "WalkResult": ".files",
    "WriteFileRequest": ".files", "WriteFileResult": ".files", "SyncFileBytes": ".sync_bytes",
    # patches
    "ChangedFile": ".patches", "Patcher": ".patches", "PatchPlan": ".patches", "PatchRequest": ".patches",
    "PatchResult": ".patches", "PatchTarget": ".patches",
    # tools a plugin adds (codespace_register_tools)
    "ToolDefinition": "codespace.tooling", "ToolCall": "codespace.tooling", "ToolRegistrar": "codespace.tooling",
    "OperationArgs": "codespace.tooling", "Needs": "codespace.tooling",
    "Strict": "codespace.models", "Model": "codespace.models",
    "proc_start_ticks": "codespace.store.base",
    # network audit (the egress proxy's trail in the operation store)
    "NetworkEvent": "codespace.store.base", "NetworkAudit": ".network",
    # names in a tool's text answer, one entry a line
    "one_line": ".text",
    # glob patterns (pathspec's) matched in bounded time
    "guard_globs": ".globs", "glob_too_costly": ".globs", "MAX_GLOBS": ".globs",
    # one-shot helper processes: made non-dumpable, no core files, no LD_* steering
    "harden_process": ".hardening", "HardeningError": ".hardening",
    # long-lived processes of CodeSpace's own (server, worker): no pydantic plugins in them
    "keep_pydantic_plugins_out": "codespace.pydantic_plugins",
    # pin checks: conformance with the pinned upstream release (codespace pins check)
    "PinCheck": ".pins", "PinCheckRequest": ".pins", "PinReport": ".pins", "PinDifference": ".pins",
    "OracleUnavailable": ".pins", "codex_binary": ".pins", "pin_check_command_line": ".pins",
    "compare_pin_surface": ".pins",
    "UpstreamRpc": ".upstream_rpc", "UpstreamRpcError": ".upstream_rpc", "UpstreamRpcClosed": ".upstream_rpc", "file_uri": ".upstream_rpc",
    # running blocking work and descriptors without blocking the server
    "run_cancellable": "codespace.threads", "CancelToken": "codespace.threads",
    "read_some": "codespace.fdio", "write_all": "codespace.fdio", "wait_exit": "codespace.fdio",
    "signal_group": "codespace.fdio", "arm_parent_death_signal": "codespace.fdio", "reset_signals": "codespace.fdio",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'codespace.contract' has no attribute {name!r}")
    module = __name__ + where if where.startswith(".") else where
    # __import__ rather than importlib: importing importlib (and warnings) would cost a one-shot
    # helper process more than the module it wants.
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__

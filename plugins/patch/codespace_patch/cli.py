"""``codespace-apply-patch``: the helper executable.

Same command-line contract as upstream's ``apply_patch`` (Codex 0.171.0): the
patch is the single argument, or stdin when there is none; the summary goes to
stdout, one error line to stderr; exit 0 on success, 1 on failure, 2 on a usage
error. It can therefore run where a process is needed (inside the sandbox) and
be compared with the released binary byte for byte.

Unlike upstream it is governed: the workspace is the current directory, and
before anything runs the core decides (:mod:`codespace.contract.gate`: the
gateway's rules and messages) whether the patch may touch its targets; a refusal
exits 1 with the policy's message. The helper only implements the decision, and
reads and writes files only through the file-system plugin the server would use
(``codespace-fs``): in upstream mode through its blocking byte methods when it has them
(:class:`codespace.contract.SyncFileBytes`; no event loop is started), else through its
coroutines. Extra exit codes: 3 when the workspace or its file-system
backend is unusable, 5 and 7 when start-up hardening fails.

Environment: ``CODESPACE_PATCH_MODE`` = ``upstream`` (default) or ``atomic``;
``CODESPACE_STATE_DIR`` (the journal of atomic mode lives there).

Imports are deferred to where they are needed: start-up time is most of what a
one-shot helper costs.
"""

from __future__ import annotations

import os
import sys

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SETUP = 3
STDIN_CAP = 64 * 1024 * 1024  # read no further: bigger than any policy allows

USAGE = "Usage: apply_patch 'PATCH'\n       echo 'PATCH' | apply_patch\n"
MODE_ENV = "CODESPACE_PATCH_MODE"
KEPT_PLUGINS = "installed plugins"  # code_cache.remember's keys
KEPT_SUPPLIERS = "file-system suppliers"


def _err(text: str) -> None:
    sys.stderr.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stderr.buffer.flush()


def _out(text: str) -> None:
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.flush()


def _read_patch(args: list[str]) -> tuple[str | None, int]:
    if len(args) > 1:
        _err("Error: apply_patch accepts exactly one argument.\n")
        return None, EXIT_USAGE
    if args:
        try:
            args[0].encode("utf-8")
        except UnicodeEncodeError:
            _err("Error: apply_patch requires a UTF-8 PATCH argument.\n")
            return None, EXIT_FAILED
        return args[0], 0
    data = sys.stdin.buffer.read(STDIN_CAP + 1)
    if not data:
        _err(USAGE)
        return None, EXIT_USAGE
    if len(data) > STDIN_CAP:
        _err(f"Error: the patch on stdin is larger than {STDIN_CAP} bytes; refused.\n")
        return None, EXIT_FAILED
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        _err("Error: Failed to read PATCH from stdin.\nstream did not contain valid UTF-8\n")
        return None, EXIT_FAILED


def main(argv: list[str] | None = None, *, plugins: list[tuple[str, str]] | None = None) -> int:
    """``plugins``: the installed plugins' (name, entry point value), from the process that
    started the helper (:mod:`.spawn`); None looks them up."""
    from codespace.contract.hardening import HardeningError, harden_process

    try:
        harden_process()
    except HardeningError as exc:
        _err(f"codespace-apply-patch: refusing to run: {exc}\n")
        return exc.exit_code
    text, code = _read_patch(sys.argv[1:] if argv is None else argv)
    if text is None:
        return code
    mode = os.environ.get(MODE_ENV, "upstream")
    if mode not in ("upstream", "atomic"):
        _err(f"codespace-apply-patch: {MODE_ENV} must be 'upstream' or 'atomic', not {mode!r}\n")
        return EXIT_SETUP
    return _run(text, mode, plugins)


def _run(text: str, mode: str, plugins: list[tuple[str, str]] | None) -> int:
    from codespace.contract import gate

    from .errors import PatchError
    from .parser import parse_patch
    from .targets import targets_of

    try:
        workspace = gate.open_workspace(os.getcwd())
    except gate.WorkspaceError as exc:
        _err(f"codespace-apply-patch: {exc}\n")
        return EXIT_SETUP
    refusal = gate.patch_size_refusal(workspace, len(text.encode("utf-8")))
    if refusal is not None:
        _err(refusal.message + "\n")
        return EXIT_FAILED
    try:
        patch = parse_patch(text)
    except PatchError as exc:
        _err(exc.message + "\n")
        return EXIT_FAILED
    cwd = workspace.root_str  # a str: ``root`` is a Path, and pathlib costs the helper more than its patch
    refusal = gate.patch_targets_refusal(workspace, targets_of(patch, cwd))
    if refusal is not None:
        _err(refusal.message + "\n")
        return EXIT_FAILED
    fs = _filesystem(workspace, plugins)
    if fs is None:
        return EXIT_SETUP
    if mode == "upstream":
        blocking = gate.blocking_bytes(fs)  # isinstance(fs, SyncFileBytes), without loading typing
        if blocking is not None:
            return _apply_loop_free(patch, workspace, blocking, cwd)
    import asyncio  # the FileSystem backend's methods are coroutines

    return asyncio.run(_apply(patch, mode, workspace, fs, cwd))


def _filesystem(workspace, plugins: list[tuple[str, str]] | None):  # noqa: ANN001, ANN202
    from codespace.contract import gate, helper_plugins

    from . import code_cache

    listed = _installed_plugins() if plugins is None else plugins
    if listed is not None:
        # The plugins that could supply the backend, as the previous run judged them: the
        # others are not imported (about 1.7 ms of a 50 ms run here for the four that ship).
        suppliers = helper_plugins.kept_suppliers(code_cache.remembered(KEPT_SUPPLIERS), listed)
        if suppliers is not None:
            fs, _ = gate.filesystem(workspace, suppliers)
            if fs is not None:
                return fs
    fs, failed = gate.filesystem(workspace, listed)
    if fs is None:
        _err(
            "codespace-apply-patch: no file-system backend is installed; the helper reads and writes files only "
            "through one. Install codespace-fs (pip install ./plugins/fs from the CodeSpace repository)"
            + (f". Plugins that failed to load: {'; '.join(failed)}" if failed else "") + ".\n"
        )
    elif listed is not None:
        code_cache.remember(KEPT_SUPPLIERS, helper_plugins.suppliers_to_keep(listed))
    return fs


def _installed_plugins() -> list[tuple[str, str]] | None:
    """The installed plugins, for a helper not handed them (the command typed in a shell):
    the previous run's answer while nothing it was read from has changed, else a scan of
    the installed distributions (about 1.5 ms of a 20 ms run; checking the answer, 0.2).
    None: only importlib.metadata can tell (the core asks it)."""
    from codespace.contract import installed

    from . import code_cache

    found = installed.kept_answer(code_cache.remembered(KEPT_PLUGINS))
    if found is None:
        found, record = installed.scan_to_keep()
        code_cache.remember(KEPT_PLUGINS, record)
    return found


def _resolver(cwd: str):  # noqa: ANN202
    from codespace.contract.gate import normalize

    def resolve(path: str) -> str:
        return normalize(path, cwd)

    return resolve


def _apply_loop_free(patch, workspace, fs, cwd: str) -> int:  # noqa: ANN001
    """Upstream mode through the backend's blocking byte methods: no event loop, no asyncio."""
    from .errors import PatchError
    from .loop_free import LoopFreeStore, drive
    from .sections import run_sections

    store = LoopFreeStore(fs, workspace.limits.max_file_bytes)
    try:
        run = drive(run_sections(patch, _resolver(cwd), store))
    except PatchError as exc:
        _err(exc.message + "\n")
        return EXIT_FAILED
    _out(run.summary())
    return 0


async def _apply(patch, mode: str, workspace, fs, cwd: str) -> int:  # noqa: ANN001
    from .errors import PatchError
    from .sections import run_sections

    resolve = _resolver(cwd)
    max_bytes = workspace.limits.max_file_bytes
    try:
        if mode == "upstream":
            from .stores import DirectStore

            run = await run_sections(patch, resolve, DirectStore(fs, max_bytes))
        else:
            run = await _apply_atomic(patch, resolve, workspace, fs, max_bytes)
    except PatchError as exc:
        _err(exc.message + "\n")
        return EXIT_FAILED
    _out(run.summary())
    return 0


async def _apply_atomic(patch, resolve, workspace, fs, max_bytes: int):  # noqa: ANN001, ANN202
    from codespace.contract import ToolError

    from .errors import PatchError
    from .journal import JournalFailed, RollbackFailed, commit_once, pending, recover
    from .plugin import journal_dir
    from .sections import run_sections
    from .stores import OverlayStore

    directory = journal_dir(workspace)
    if pending(directory):
        await recover(fs, directory, max_bytes, workspace.paths)  # judged: the state dir may be the agent's
    store = OverlayStore(fs, max_bytes, workspace.root_str)
    run = await run_sections(patch, resolve, store)
    changes = store.changes()
    if changes or store.new_dirs:
        workspace.ensure_state_dir()
        try:
            await commit_once(fs, directory, changes, store.new_dirs, max_bytes, store.moved_from)
        except ToolError as exc:  # upstream's words for the step that failed, as upstream mode gives them
            raise PatchError(exc.details.get("upstream_message") or f"atomic commit failed: {exc}") from exc
        except (RollbackFailed, JournalFailed, OSError) as exc:
            raise PatchError(f"atomic commit failed: {exc}") from exc
    return run


def exit_now(code: int) -> None:
    """Leave with ``code`` once the output is flushed, skipping the interpreter's teardown:
    nothing is left to clean up (every file is closed, every write done or journaled), and
    tearing down the modules a patch loaded took longer than many a patch (20-140 ms)."""
    sys.stdout.flush()
    sys.stderr.flush()
    cache = sys.modules.get("codespace_patch.code_cache")  # installed by the boot line or the script
    if cache is not None:
        cache.save()  # written only when missing or stale; the answer is already out
    os._exit(code)


def command() -> None:
    """The installed ``codespace-apply-patch`` command (``scripts/``): :func:`main`, then leave."""
    exit_now(main())


if __name__ == "__main__":
    command()

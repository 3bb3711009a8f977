"""The Patcher backend the host asks for: ``plan`` for the gateway's policy check,
``apply`` in either mode. All file access goes through the FileSystem the host
hands to ``apply``."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from pathlib import Path

import anyio

from codespace.contract import (
    ChangedFile,
    FileSystem,
    PatchPlan,
    PatchRequest,
    PatchResult,
    PatchTarget,
    PathRules,
    ToolError,
)
from codespace.contract import normalize

from . import diff
from .errors import PatchError, ParseError
from .journal_commit import JournalFailed, RollbackFailed, Staged, commit, settle, stage
from .journal_recovery import describe, pending, recover
from .journal_slot import Journal
from .parser import Patch, parse_patch
from .sections import Done, Run, run_sections
from .stores import DirectStore, OverlayStore
from .targets import targets_of

log = logging.getLogger(__name__)

_PARSED_CACHE = 8  # plan() then apply() parse the same text; keep it once


def _parse_hint(message: str) -> str:
    if "Unexpected line found in update hunk: '@@" in message:
        return ("Codex 0.171.0 rejects a '@@' line directly after another ('stacked' headers): give each chunk "
                "one '@@ context' line followed by its ' ', '-' and '+' lines.")
    if "is not a valid hunk header" in message:
        return ("Between sections only '*** Add File: p', '*** Delete File: p', '*** Update File: p' and "
                "'*** End Patch' may appear; every line of an Add File section starts with '+'.")
    if "Expected update hunk to start with a @@ context marker" in message:
        return ("Every line of an Update chunk starts with ' ', '-' or '+' (an empty line is an empty context "
                "line); start a new chunk with '@@'.")
    return ""


def as_tool_error(exc: PatchError, **extra: object) -> ToolError:
    details = {"upstream_message": exc.message, **exc.details, **extra}
    hint = exc.hint or (_parse_hint(exc.message) if isinstance(exc, ParseError) else "")
    text = exc.message + (f"\n\n{hint}" if hint else "")
    return ToolError(text, code=exc.code, details=details)


def _label(path: str, cwd: str, side: str) -> str:
    """``a/<relative path>`` for a file in the workspace, the absolute path otherwise."""
    prefix = cwd.rstrip("/") + "/"
    return f"{side}/{path[len(prefix):]}" if path.startswith(prefix) else path


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _file_diff(done: Done, cwd: str) -> str:
    a = _label(done.move_from or done.path, cwd, "a")
    b = _label(done.path, cwd, "b")
    if done.rewrite is not None:
        if done.move_from is not None and done.move_from == done.path:
            return diff.whole_file(_text(done.before), None, a, b)  # a move onto itself deletes the file
        return diff.unified(done.rewrite.old, done.rewrite.new, done.rewrite.kept, a, b)
    try:
        return diff.whole_file(_text(done.before), _text(done.after), a, b)
    except UnicodeDecodeError:
        return diff.binary(a, b)


DIFF_CAP = 256 * 1024  # per file: a whole new 5 MB file is not worth echoing back to the agent


def _capped(text: str) -> str:
    if len(text) <= DIFF_CAP:
        return text
    cut = text.rfind("\n", 0, DIFF_CAP) + 1
    return text[:cut] + f"... diff truncated: {len(text) - cut} more characters; read the file for the rest\n"


def result_of(run: Run, cwd: str, applied: bool) -> PatchResult:
    # Built from values this module produced: model_construct skips re-validating them
    # (200 files' worth of validation is a visible share of a 200-file patch).
    files = [
        ChangedFile.model_construct(
            path=d.path, action=d.action, move_from=d.move_from, diff=_capped(_file_diff(d, cwd))
        )
        for d in run.done
    ]
    return PatchResult.model_construct(summary=run.summary(), files=files, applied=applied)


def _target(path: str, action: str, role: str = "target") -> PatchTarget:
    return PatchTarget.model_construct(path=path, action=action, role=role)


def _journal_failed(journal_dir: Path, exc: BaseException | None) -> ToolError:
    return ToolError(
        f"the atomic commit could not write its journal in {journal_dir} ({exc}); no file was changed. "
        "Free space in the state directory, or use mode='upstream'.",
        code="patch_commit_failed",
    )


class PatchBackend:
    """Patcher for one workspace (``max_bytes``: the policy's largest file; ``rules``: its path
    rules, which recovery holds a journal's paths to)."""

    def __init__(self, max_bytes: int, rules: PathRules | None = None) -> None:
        self.max_bytes = max_bytes
        self.rules = rules
        self._parsed: OrderedDict[str, Patch] = OrderedDict()
        # One patch at a time per workspace: atomic mode computes from what it read,
        # so another patch committing in between would be overwritten.
        self._lock = anyio.Lock()
        self._settling: asyncio.Task[None] | None = None
        self._journal: Journal | None = None

    def parse(self, patch: str) -> Patch:
        cached = self._parsed.get(patch)
        if cached is not None:
            self._parsed.move_to_end(patch)
            return cached
        try:
            patch.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolError(
                f"the patch is not valid Unicode text (a lone surrogate at character {exc.start}); "
                "send the patch as plain UTF-8 text",
                code="patch_invalid",
            ) from None
        try:
            parsed = parse_patch(patch)
        except ParseError as exc:
            raise as_tool_error(exc) from None
        self._parsed[patch] = parsed
        if len(self._parsed) > _PARSED_CACHE:
            self._parsed.popitem(last=False)
        return parsed

    def plan(self, patch: str, cwd: str) -> PatchPlan:
        targets = [_target(*t) for t in targets_of(self.parse(patch), cwd)]
        return PatchPlan.model_construct(targets=targets)

    async def apply(self, request: PatchRequest, fs: FileSystem, journal_dir: Path) -> PatchResult:
        patch = self.parse(request.patch)
        cwd = request.cwd
        if not cwd.startswith("/"):
            raise ToolError(f"the host passed no absolute directory for relative patch paths (cwd={cwd!r})",
                            code="patch_no_cwd")

        def resolve(path: str) -> str:
            return normalize(path, cwd)

        async with self._lock:
            await self.settled()
            if request.mode == "upstream" and not request.dry_run:
                return await self._apply_upstream(patch, resolve, fs, cwd)
            await self.recover(fs, journal_dir)
            store = OverlayStore(fs, self.max_bytes, cwd)
            try:
                run = await run_sections(patch, resolve, store, want_diff=True)
            except PatchError as exc:
                raise as_tool_error(exc, mode=request.mode, changed=False) from None
            if request.dry_run:
                return result_of(run, cwd, applied=False)
            staged = self._stage(self._journal_in(journal_dir), store)
            if staged is None:
                return result_of(run, cwd, applied=True)
            try:
                # The answer (diffs included) is built while the disk writes the journal.
                result = result_of(run, cwd, applied=True)
            except BaseException:
                staged.discard()
                raise
            await self._commit(fs, staged)
            return result

    async def _apply_upstream(self, patch: Patch, resolve, fs: FileSystem, cwd: str) -> PatchResult:
        run = Run()
        try:
            try:
                await run_sections(patch, resolve, DirectStore(fs, self.max_bytes), want_diff=True, run=run)
            finally:
                self._settle_later(fs, None)  # section writes skip their own flushes (upstream flushes none)
        except PatchError as exc:
            kept = [f"{'A' if d.action == 'add' else 'D' if d.action == 'delete' else 'M'} {d.shown}" for d in run.done]
            if kept:
                exc.hint = (exc.hint + "\n\n" if exc.hint else "") + (
                    "mode='upstream' keeps the sections applied before the failure: " + ", ".join(kept)
                    + ". Send only the remaining sections, or use mode='atomic' for all-or-nothing."
                )
            raise as_tool_error(exc, mode="upstream", applied_before_failure=kept) from None
        return result_of(run, cwd, applied=True)

    def _journal_in(self, journal_dir: Path) -> Journal:
        """This Patcher's journal file in ``journal_dir``, reused by every commit."""
        if self._journal is None or self._journal.journal_dir != journal_dir or self._journal.fd < 0:
            self._journal = Journal(journal_dir)
        return self._journal

    def _stage(self, journal: Journal, store: OverlayStore) -> Staged | None:
        changes = store.changes()
        if not changes and not store.new_dirs:
            return None
        try:
            return stage(journal, changes, store.new_dirs, store.moved_from)
        except OSError as exc:
            raise _journal_failed(journal.journal_dir, exc) from exc

    async def _commit(self, fs: FileSystem, staged: Staged) -> None:
        # A cancelled call must not stop a commit half-way; the journal covers crashes.
        with anyio.CancelScope(shield=True):
            try:
                self._settle_later(fs, await commit(fs, staged, self.max_bytes))
            except JournalFailed as exc:
                raise _journal_failed(staged.journal.journal_dir, exc.__cause__) from exc
            except RollbackFailed as exc:
                raise ToolError(str(exc), code="patch_commit_failed") from exc
            except ToolError as exc:
                upstream = exc.details.get("upstream_message")
                raise ToolError(
                    (f"{upstream}\n\n" if upstream else "")
                    + f"The atomic commit failed and was rolled back; no file was changed. Cause: {exc.message}",
                    code="patch_commit_failed", details=exc.details,
                ) from exc

    def _settle_later(self, fs: FileSystem, journal: Journal | None) -> None:
        """Flush the writes (and void the journal record) after the answer: the next
        apply waits for it, so commits in one workspace never overlap."""
        self._settling = asyncio.get_running_loop().create_task(settle(fs, journal))

    async def settled(self) -> None:
        """Wait until the last apply's writes are flushed and its journal record voided."""
        task = self._settling
        if task is not None:
            await asyncio.shield(task)  # a cancelled waiter must not cancel the flush
            if self._settling is task:
                self._settling = None

    async def recover(self, fs: FileSystem, journal_dir: Path) -> None:
        if not pending(journal_dir):
            return
        outcome = await recover(fs, journal_dir, self.max_bytes, self.rules)
        text = describe(outcome)
        if text:
            log.warning("patch journal %s: %s", journal_dir, text)

"""The gateway: every tool call is checked and recorded here before a backend runs.

Order of a call: size limit -> argument validation -> path normalisation ->
operation identity (replay / conflict / wait for an in-flight duplicate) ->
policy check (paths as written and as resolved, commands argv by argv) ->
handler -> record. Refusals name the rule and are recorded too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ValidationError

from .contract import BackendMissing, Refused, RunnerLost, ToolError
from .contract.gate import path_syntax_refusal, paths_refusal
from .outcome import Outcome, error_outcome, refusal_outcome
from .policy import normalize
from . import reaper
from .store import INTERRUPTED, OperationRecord, owner_alive
from .surrogates import describe as describe_surrogate
from .surrogates import find_lone_surrogate
from .schemas import structured_result
from .tooling import Needs, ProgressFn, ToolCall, ToolDefinition

if TYPE_CHECKING:
    from .backends import Backends
    from .contract.commands import CommandSessions
    from .plugins import Plugins
    from .processes import ProcessRegistry
    from .store import OperationStore
    from .tooling import ToolRegistry
    from .workspace import Workspace

log = logging.getLogger(__name__)

ARGUMENT_SUMMARY_CHARS = 2000
FOREIGN_WAIT_S = 30.0  # how long to wait for a duplicate another server is running


def new_operation_id() -> str:
    return f"op-{int(time.time() * 1000):012x}-{secrets.token_hex(5)}"


def arguments_hash(tool: str, args: dict[str, Any]) -> str:
    canonical = json.dumps({"tool": tool, "arguments": args}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _summary(args: dict[str, Any]) -> str:
    text = json.dumps(args, ensure_ascii=False, default=str)
    return text if len(text) <= ARGUMENT_SUMMARY_CHARS else text[:ARGUMENT_SUMMARY_CHARS] + "...(shortened)"


def _argument_bytes(raw: dict[str, Any]) -> int:
    return len(json.dumps(raw, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def describe_validation_error(tool: str, exc: ValidationError) -> str:
    problems = []
    for item in exc.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(arguments)"
        if item["type"] == "extra_forbidden":
            message = "unknown argument"
        elif item["type"] == "value_error" and "error" in item.get("ctx", {}):
            message = str(item["ctx"]["error"])  # our validators' own words, without pydantic's "Value error, "
        elif item["type"] == "int_parsing_size":  # pydantic: "Unable to parse input string...", for 1e300 too
            message = "the number is far too large for this integer argument; give a whole number within its schema's bounds"
        else:
            message = item["msg"]
        problems.append(f"'{where}': {message}")
    return f"invalid arguments for {tool}: " + "; ".join(problems) + ". Check the tool's input schema and call again."


class Gateway:
    def __init__(
        self,
        workspace: Workspace,
        registry: ToolRegistry,
        backends: Backends,
        plugins: Plugins,
        store: OperationStore,
        processes: ProcessRegistry | None = None,
        sessions: CommandSessions | None = None,
    ) -> None:
        self.workspace = workspace
        self.registry = registry
        self.backends = backends
        self.plugins = plugins
        self.store = store
        self.processes = processes
        self.local_sessions = sessions
        self._inflight: dict[str, anyio.Event] = {}

    def sessions(self) -> CommandSessions | None:
        """The workspace's command sessions: this server's registry, or a worker's."""
        return None if self.local_sessions is None else self.backends.sessions(self.local_sessions)

    # -- entry point -----------------------------------------------------------

    async def call(
        self, name: str, raw_args: dict[str, Any] | None, *, client: str | None = None, progress: ProgressFn | None = None
    ) -> Outcome:
        tool = self.registry.get(name)
        if tool is None:
            known = ", ".join(sorted(t.name for t in self.registry))
            shown = name if len(name) <= 80 else name[:80] + "..."  # not a 100,000-character name echoed whole
            return error_outcome("unknown_tool", f"unknown tool {shown!r}; available tools: {known}")
        raw_args = raw_args or {}

        limit = self.workspace.limits.max_argument_bytes
        size = _argument_bytes(raw_args)
        if size > limit:
            refusal = Refused(
                "limits.max_argument_bytes",
                f"refused by policy: the arguments are {size} bytes and limits.max_argument_bytes is {limit}. "
                "To proceed: split the work into smaller calls (for example several smaller patches or writes).",
            )
            return await self._record_refusal(tool, None, refusal, {"size": size}, client)

        surrogate_at = find_lone_surrogate(raw_args)
        if surrogate_at is not None:
            return error_outcome("invalid_arguments", describe_surrogate(name, surrogate_at), {"argument": surrogate_at})
        try:
            args = tool.arguments.model_validate(raw_args)
        except ValidationError as exc:
            return error_outcome("invalid_arguments", describe_validation_error(name, exc))

        call = ToolCall(
            tool=tool, workspace=self.workspace, backends=self.backends, plugins=self.plugins, store=self.store,
            processes=self.processes, operation_id=None, client=client, _progress=progress,
            _sessions=self.sessions,
        )
        try:
            args, needs = self._resolve_paths(tool, args)
        except Refused as refused:
            return await self._record_refusal(tool, None, refused, raw_args, client)

        if not tool.side_effects:
            try:
                self._check(tool, args, call, needs)
            except Refused as refused:
                return await self._record_refusal(tool, None, refused, raw_args, client)
            except ToolError as exc:
                return error_outcome(exc.code, exc.message, exc.details)
            return await self._run(tool, args, call)
        return await self._call_with_operation(tool, args, call, needs)

    # -- operations --------------------------------------------------------------

    async def _call_with_operation(self, tool: ToolDefinition, args: BaseModel, call: ToolCall, needs: Needs) -> Outcome:
        operation_id = getattr(args, "operation_id", None) or new_operation_id()
        call.operation_id = operation_id
        dumped = args.model_dump(mode="json", exclude={"operation_id"})
        args_hash = arguments_hash(tool.name, dumped)
        began = await self.store.begin(operation_id, tool.name, args_hash, _summary(dumped), call.client)
        if began.outcome == "conflict":
            return error_outcome(
                "operation_conflict",
                f"operation_id {operation_id!r} was already used for a different call "
                f"({began.record.tool}, status {began.record.status}); use a new operation_id for a new call, "
                "or repeat the original arguments to get its result.",
                {"operation_id": operation_id, "tool": began.record.tool, "status": began.record.status},
            )
        if began.outcome == "existing":
            record = await self._wait_finished(began.record)
            return self._replay(tool, record)

        event = self._inflight[operation_id] = anyio.Event()
        try:
            try:
                self._check(tool, args, call, needs)
            except Refused as refused:
                return await self._finish_refused(tool, operation_id, refused)
            except ToolError as exc:
                # Nothing ran (no backend, a patch that does not parse): the key stays free for a retry.
                await self.store.forget(operation_id)
                return error_outcome(exc.code, exc.message, exc.details)
            return await self._run(tool, args, call)
        finally:
            del self._inflight[operation_id]
            event.set()

    async def _wait_finished(self, record: OperationRecord) -> OperationRecord:
        if record.status != "running" or record.result is not None:
            return record  # finished, or detached with an interim result to re-attach by
        event = self._inflight.get(record.operation_id)
        if event is not None:
            await event.wait()
        else:
            with anyio.move_on_after(FOREIGN_WAIT_S):
                while record.status == "running" and owner_alive(record.owner):
                    await anyio.sleep(0.1)
                    record = await self.store.get(record.operation_id) or record
            if record.status == "running" and not owner_alive(record.owner) \
                    and self.workspace.policy.runtime.worker != "daemon":
                # Its server died after this one started (or under a launcher that had not reaped
                # it then): nothing will finish it, so it is interrupted now, not at the next start
                # (found by testing from outside: retries waited 30 s for "another server"). A
                # daemon worker may still run its command, for the next server to adopt.
                await self.store.finish(record.operation_id, "interrupted", error=INTERRUPTED)
                reaper.reap([record])  # what its command left, as the next start would
                record = await self.store.get(record.operation_id) or record
            return record
        return await self.store.get(record.operation_id) or record

    def _replay(self, tool: ToolDefinition, record: OperationRecord) -> Outcome:
        # A detached operation (a command still running) replays its interim result,
        # which says how to re-attach.
        if record.result is not None and record.status in ("succeeded", "running") and "error" not in record.result:
            structured = {**record.result, "replayed": True}
            if record.status != "running":
                structured.pop("next_step", None)  # an exec's "still running" hint, stale once it ended
            try:
                fields = {k: v for k, v in record.result.items() if k not in ("operation_id", "replayed")}
                text = tool.render_text(tool.result.model_validate(fields), structured)
            except ValidationError:
                text = json.dumps(structured, ensure_ascii=False)
            return Outcome(False, text, structured)
        if record.status == "running":
            return error_outcome(
                "operation_running",
                f"operation {record.operation_id} is still running in another server; poll get_operation "
                "and do not start it again.",
                {"operation_id": record.operation_id},
            )
        if record.status == "interrupted":
            message = (
                f"operation {record.operation_id} was interrupted: the server stopped while it ran, so its "
                "effects may be partial. Inspect the workspace, then retry with a new operation_id."
            )
        else:
            message = f"{record.error or 'the operation did not succeed'} (replayed: operation " \
                      f"{record.operation_id} already ended with status {record.status})"
        stored = (record.result or {}).get("error") or {}
        error = {
            **stored, "code": stored.get("code", record.status), "message": message,
            "operation_id": record.operation_id, "replayed": True, "status": record.status,
        }
        return Outcome(True, message, None, error)

    # -- policy -------------------------------------------------------------------

    def _normalize(self, raw: str) -> str:
        refusal = path_syntax_refusal(raw)
        if refusal is not None:
            raise refusal
        return normalize(raw, str(self.workspace.root))

    def _resolve_paths(self, tool: ToolDefinition, args: BaseModel) -> tuple[BaseModel, Needs]:
        if not tool.paths:
            return args, Needs()
        updates: dict[str, str] = {}
        needs = Needs()
        for field, need in tool.paths.items():
            raw = getattr(args, field)
            if raw is None:
                continue
            absolute = self._normalize(raw)
            updates[field] = absolute
            (needs.write if need == "write" else needs.read).append(absolute)
        return args.model_copy(update=updates), needs

    def judged(self, tool: ToolDefinition, args: BaseModel, call: ToolCall) -> BaseModel:
        """``args`` with their paths resolved, after the policy's checks (raises Refused): what a
        process running the tool in the server's stead (a worker) applies again."""
        args, needs = self._resolve_paths(tool, args)
        self._check(tool, args, call, needs)
        return args

    def _check(self, tool: ToolDefinition, args: BaseModel, call: ToolCall, static: Needs) -> None:
        needs = static
        if tool.needs is not None:
            dynamic = tool.needs(args, call)  # may raise Refused (e.g. a sandbox the policy requires)
            needs = Needs(
                read=[*static.read, *(self._normalize(p) for p in dynamic.read)],
                write=[*static.write, *(self._normalize(p) for p in dynamic.write)],
                write_through=[self._normalize(p) for p in dynamic.write_through],
                argv=dynamic.argv,
                shell=dynamic.shell,
            )
        refusal = paths_refusal(
            self.workspace.paths, read=needs.read, write=needs.write, write_through=needs.write_through
        )
        if refusal is not None:
            raise refusal
        for argv in needs.argv:
            refusal = self.workspace.commands.check_argv(argv)
            if refusal is not None:
                raise refusal
        for script in needs.shell:
            refusal = self.workspace.commands.check_shell(script)
            if refusal is not None:
                raise refusal

    async def _record_refusal(
        self, tool: ToolDefinition, operation_id: str | None, refusal: Refused, raw_args: dict[str, Any], client: str | None
    ) -> Outcome:
        operation_id = operation_id or new_operation_id()
        outcome = refusal_outcome(refusal, operation_id)
        await self.store.insert_finished(
            OperationRecord(
                operation_id=operation_id, tool=tool.name, args_hash=arguments_hash(tool.name, raw_args),
                arguments=_summary(raw_args), status="refused", result=outcome.stored(), error=refusal.message,
                rule=refusal.rule, client=client, created_at=time.time(),
            )
        )
        log.info("refused %s (%s): %s", tool.name, refusal.rule, refusal.message)
        return outcome

    async def _finish_refused(self, tool: ToolDefinition, operation_id: str, refusal: Refused) -> Outcome:
        outcome = refusal_outcome(refusal, operation_id)
        await self.store.finish(operation_id, "refused", result=outcome.stored(), error=refusal.message, rule=refusal.rule)
        log.info("refused %s (%s): %s", tool.name, refusal.rule, refusal.message)
        return outcome

    # -- running ------------------------------------------------------------------

    async def _handle(self, tool: ToolDefinition, args: BaseModel, call: ToolCall) -> BaseModel:
        """The handler's result, from the worker when one serves the workspace and the tool acts
        on the workspace itself (the others reach it through backends the worker serves)."""
        if tool.runs_on_workspace:
            runner = self.backends.tool_runner()
            if runner is not None:
                data = await runner.run_tool(tool.name, args.model_dump(mode="json", exclude={"operation_id"}),
                                             call.operation_id)
                return tool.result.model_validate(data)
        return await tool.handler(call, args)

    async def _run(self, tool: ToolDefinition, args: BaseModel, call: ToolCall) -> Outcome:
        operation_id = call.operation_id
        try:
            result = await self._handle(tool, args, call)
        except anyio.get_cancelled_exc_class():
            if operation_id is not None:
                with anyio.CancelScope(shield=True):
                    await self.store.finish(
                        operation_id, "cancelled", error=call.cancel_note or "cancelled by the client or a shutdown"
                    )
            raise
        except BackendMissing as exc:
            if operation_id is not None:
                await self.store.forget(operation_id)
            return error_outcome(exc.code, exc.message, exc.details)
        except RunnerLost as exc:  # the worker died: nothing ran (key free again) or it may have run
            outcome = error_outcome(exc.code, exc.message, exc.details, operation_id)
            if operation_id is not None:
                if exc.dispatched:
                    await self.store.finish(operation_id, "interrupted", result=outcome.stored(), error=exc.message)
                else:
                    await self.store.forget(operation_id)
            return outcome
        except Refused as refusal:  # a backend's own policy check (e.g. where a followed link led)
            if operation_id is None:
                return await self._record_refusal(tool, None, refusal, {}, call.client)
            return await self._finish_refused(tool, operation_id, refusal)
        except ToolError as exc:
            outcome = error_outcome(exc.code, exc.message, exc.details, operation_id)
            if operation_id is not None:
                # A shutdown that stopped the work is a cancellation, not the call's failure.
                status = "cancelled" if exc.code == "shutting_down" else "failed"
                await self.store.finish(operation_id, status, result=outcome.stored(), error=exc.message)
            return outcome
        except Exception as exc:
            owner = self.registry.owners.get(tool.name, "?")
            log.exception("tool %s (plugin %s) failed", tool.name, owner)
            message = (
                f"internal error in {tool.name} (provided by {owner}): {type(exc).__name__}: {exc}. "
                "This is a bug in CodeSpace or the plugin, not in your request; the server log has the traceback."
            )
            outcome = error_outcome("internal_error", message, None, operation_id)
            if operation_id is not None:
                await self.store.finish(operation_id, "failed", result=outcome.stored(), error=message)
            return outcome
        structured = structured_result(result)
        if operation_id is not None:
            structured["operation_id"] = operation_id
            structured["replayed"] = False
            # The change is made: a cancellation arriving now must not leave the record saying otherwise.
            with anyio.CancelScope(shield=True):
                try:
                    if call.detached:
                        await self.store.set_interim(operation_id, structured)
                    else:
                        await self.store.finish(operation_id, "succeeded", result=structured)
                except Exception:  # noqa: BLE001 - the work is done: its result still goes to the agent
                    log.exception("the result of operation %s could not be recorded; a retry with its "
                                  "operation_id will say it is still running", operation_id)
        return Outcome(False, tool.render_text(result, structured), structured)

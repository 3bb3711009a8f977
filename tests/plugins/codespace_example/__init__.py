"""A test-only plugin, registered through an entry point like a real one.

Its tools exercise the host: side effects counted on disk (idempotency), progress,
cancellation that must stop a worker thread, internal errors, command checks and
a process group left behind for crash recovery.
"""

from __future__ import annotations

import os
import subprocess
import time

import anyio
from pydantic import BaseModel, ConfigDict, Field

from codespace import hookimpl
from codespace.contract import Check, Needs, OperationArgs, ToolDefinition, proc_start_ticks, run_cancellable


class TallyArgs(OperationArgs):
    name: str = Field(pattern=r"^[a-z0-9_-]+$", description="Counter to increment.")
    sleep_ms: int = Field(default=0, ge=0, description="Work time before the increment, with progress reports.")


class TallyResult(BaseModel):
    name: str
    count: int = Field(description="Executions so far.")


async def tally(call, args: TallyArgs) -> TallyResult:
    steps = max(1, args.sleep_ms // 50)
    for step in range(steps):
        await call.progress(step, steps, f"step {step}")
        await anyio.sleep(args.sleep_ms / 1000 / steps)
    path = call.workspace.root / ".tally" / args.name
    path.parent.mkdir(exist_ok=True)
    with open(path, "a") as f:
        f.write("x\n")
    with open(path) as f:
        return TallyResult(name=args.name, count=len(f.readlines()))


class SpinArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    marker: str = Field(description="Absolute path of a marker file the worker thread updates.")


class SpinResult(BaseModel):
    iterations: int


async def spin(call, args: SpinArgs) -> SpinResult:
    def work(cancel) -> SpinResult:
        with open(args.marker, "w") as f:
            f.write("started")
        n = 0
        while not cancel.is_set() and n < 3000:
            time.sleep(0.01)
            n += 1
        with open(args.marker, "w") as f:
            f.write("stopped")
        return SpinResult(iterations=n)

    return await run_cancellable(work)


class Empty(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BoomResult(BaseModel):
    ok: bool


async def boom(call, args: Empty) -> BoomResult:
    raise RuntimeError("the example plugin failed on purpose")


class ArgvArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    argv: list[str] | None = Field(default=None, description="A command as argv.")
    script: str | None = Field(default=None, description="A command as a shell string.")


class ArgvResult(BaseModel):
    allowed: bool


async def check_command(call, args: ArgvArgs) -> ArgvResult:
    return ArgvResult(allowed=True)


def _command_needs(args: ArgvArgs, call) -> Needs:
    return Needs(argv=[args.argv] if args.argv else [], shell=[args.script] if args.script else [])


class OrphanArgs(OperationArgs):
    pass


class OrphanResult(BaseModel):
    pid: int


async def spawn_orphan(call, args: OrphanArgs) -> OrphanResult:
    proc = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    await call.store.attach_process(call.operation_id, proc.pid, proc_start_ticks(proc.pid))
    with open(call.workspace.root / "orphan.pid", "w") as f:
        f.write(str(proc.pid))
    await anyio.sleep(3600)
    return OrphanResult(pid=proc.pid)


@hookimpl
def codespace_register_tools(register):
    register(ToolDefinition(
        name="tally", description="Increment a counter file (test side effect).",
        arguments=TallyArgs, result=TallyResult, handler=tally,
    ))
    register(ToolDefinition(
        name="spin", description="Spin a worker thread until cancelled (test cancellation).",
        arguments=SpinArgs, result=SpinResult, handler=spin, read_only=True,
    ))
    register(ToolDefinition(
        name="boom", description="Raise an unexpected exception (test internal errors).",
        arguments=Empty, result=BoomResult, handler=boom, read_only=True,
    ))
    register(ToolDefinition(
        name="check_command", description="Check a command against the policy without running it.",
        arguments=ArgvArgs, result=ArgvResult, handler=check_command, read_only=True, needs=_command_needs,
    ))
    register(ToolDefinition(
        name="spawn_orphan", description="Start a process group and hang (test crash recovery).",
        arguments=OrphanArgs, result=OrphanResult, handler=spawn_orphan,
    ))


@hookimpl
def codespace_doctor(workspace):
    return [Check("example plugin", True, f"serving {workspace.root}")]


@hookimpl
def codespace_startup(workspace):
    marker = os.environ.get("CODESPACE_EXAMPLE_STARTUP_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write(f"{workspace.root}\n")


@hookimpl
def codespace_services(workspace, store):
    async def heartbeat():
        marker = os.environ.get("CODESPACE_EXAMPLE_SERVICE_MARKER")
        if marker:
            with open(marker, "w") as f:
                f.write("running")
        await anyio.sleep_forever()

    async def crashes():
        raise RuntimeError("this service fails on purpose; the server must go on")

    return [heartbeat, crashes]

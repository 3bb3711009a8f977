"""A test-only Sandbox backend that confines nothing: it marks, in the command's
environment, whether the host took the fast path (``launch``) or ``wrap``."""

from __future__ import annotations

import os
import subprocess

import anyio

from codespace import hookimpl
from codespace.contract import CommandSpec, SandboxInfo, wait_exit


class _Launched:
    def __init__(self, popen: subprocess.Popen) -> None:
        self.pid = popen.pid
        self._popen = popen
        self._pidfd = os.pidfd_open(popen.pid)
        self.released = False

    async def wait(self) -> int:
        code = await wait_exit(self.pid, self._pidfd)
        self._popen.returncode = code
        return code

    def release(self) -> None:
        os.close(self._pidfd)
        self.released = True


class FakeSandbox:
    launched: list[_Launched] = []

    def info(self) -> SandboxInfo:
        return SandboxInfo(engine="fake", available=True, detail="test-only, confines nothing")

    def wrap(self, spec: CommandSpec, layout) -> CommandSpec:
        return spec.model_copy(update={"argv": ["env", "SANDBOX_PATH=wrap", *spec.argv]})

    async def launch(self, spec: CommandSpec, layout, stdio) -> _Launched:
        await anyio.lowlevel.checkpoint()
        popen = subprocess.Popen(["env", "SANDBOX_PATH=launch", *spec.argv], cwd=spec.cwd, env=spec.env,
                                 stdin=stdio[0], stdout=stdio[1], stderr=stdio[2], start_new_session=True)
        launched = _Launched(popen)
        FakeSandbox.launched.append(launched)
        return launched


@hookimpl
def codespace_sandbox(workspace):
    return FakeSandbox()

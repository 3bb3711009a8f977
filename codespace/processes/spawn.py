"""Start a command on pipes, without a thread per process.

The child leads its own session (so its group and session can be killed as a
whole), gets SIGTERM if the server dies (``PR_SET_PDEATHSIG``), and reads
/dev/null unless the session is interactive.

The death signal is set by util-linux ``setpriv --pdeathsig`` exec'd in front of
the command when it is installed: a Python ``preexec_fn`` forces a full fork of
the server (no vfork) and costs ~18 ms per spawn here against ~5 ms. The
fallback is the ``preexec_fn``, which also re-checks that the parent did not die
before the signal was armed. The parent ends are non-blocking and awaited with
``anyio.wait_readable``; exit is awaited on a pidfd.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from ..contract import CommandSpec, FsError, ToolError
from ..contract.sandbox import SandboxFastPath, SandboxLayout
from ..fdio import (
    arm_parent_death_signal,
    read_some,
    signal_group,
    wait_exit,
    write_all,
)
from .tracking import wrap_argv

SETPRIV = shutil.which("setpriv")
READ_CHUNK = 65536
PAYLOAD_INLINE_MAX = 65536  # a pipe buffer holds this much without a reader


def prepare_inherited(spec: CommandSpec) -> tuple[CommandSpec, list[tuple[int, bytes]]]:
    """Turn named payloads into pipes the child inherits; return the writers to feed."""
    if not spec.inherit:
        return spec, []
    env = dict(spec.env)
    pass_fds = list(spec.pass_fds)
    writers = []
    for name, payload in spec.inherit.items():
        read_end, write_end = os.pipe()
        os.set_inheritable(read_end, True)  # ptyprocess keeps pass_fds open but does not clear close-on-exec
        env[f"CODESPACE_FD_{name.upper()}"] = str(read_end)
        pass_fds.append(read_end)
        writers.append((write_end, payload))
    return spec.model_copy(update={"env": env, "pass_fds": pass_fds, "inherit": {}}), writers


async def feed_payloads(writers: list[tuple[int, bytes]]) -> None:
    for fd, payload in writers:
        try:
            os.set_blocking(fd, False)
            await write_all(fd, payload)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)


def close_parent_copies(spec: CommandSpec) -> None:
    for fd in spec.pass_fds:
        try:
            os.close(fd)
        except OSError:
            pass


def check_cwd(cwd: str) -> None:
    """Raise as chdir would, naming ``cwd``, when it is not a directory this process may enter."""
    st = os.stat(cwd)  # FileNotFoundError, naming it
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", cwd)
    if not os.access(cwd, os.X_OK):
        raise PermissionError(errno.EACCES, "Permission denied", cwd)


MAX_ARG_STRLEN = 32 * 4096
"""Linux's limit on one argument or environment string, terminating NUL included."""


def check_exec_size(spec: CommandSpec) -> None:
    """Refuse, naming the part, a command line execve would refuse with E2BIG: otherwise the
    error comes from whatever runs first (the sandbox's launcher, a tracking stub) and names it
    (found by testing)."""
    to_proceed = ("To proceed: write the data to a file in the workspace and pass its path, or give it "
                  "on stdin.")
    for index, arg in enumerate(spec.argv):
        size = len(os.fsencode(arg)) + 1
        if size > MAX_ARG_STRLEN:
            what = "the shell script" if index and spec.argv[index - 1] == "-c" else f"argument {index}"
            raise ToolError(f"{what} is {size - 1} bytes; Linux takes at most {MAX_ARG_STRLEN - 1} in one argument "
                            f"(MAX_ARG_STRLEN). Nothing was started. {to_proceed}", code="invalid_arguments")
    for key, value in spec.env.items():  # each NAME=value is one string to execve as well
        size = len(os.fsencode(key)) + len(os.fsencode(value)) + 2
        if size > MAX_ARG_STRLEN:
            raise ToolError(f"the environment variable {key[:40]!r}{'...' if len(key) > 40 else ''} is {size - 1} bytes "
                            f"(name=value); Linux takes at most {MAX_ARG_STRLEN - 1} in one (MAX_ARG_STRLEN). Nothing "
                            f"was started. {to_proceed}", code="invalid_arguments")
    total = sum(len(os.fsencode(a)) + 1 + 8 for a in spec.argv)
    total += sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in spec.env.items())
    limit = os.sysconf("SC_ARG_MAX")
    if total > limit:
        raise ToolError(f"the command line and environment come to {total} bytes; this system takes at most "
                        f"{limit} (ARG_MAX). Nothing was started. {to_proceed}", code="invalid_arguments")


def spawn_error(exc: OSError, spec: CommandSpec) -> ToolError:
    if exc.filename == spec.cwd:
        why = {errno.ENOENT: "the directory does not exist", errno.ENOTDIR: "it is not a directory",
               errno.EACCES: "this server's user may not enter it"}.get(exc.errno, exc.strerror)
        return FsError(f"cannot run in {spec.cwd}: {why}. To proceed: pass a directory of the workspace as cwd.",
                       path=spec.cwd, errno=exc.errno)
    if isinstance(exc, FileNotFoundError):
        return ToolError(
            f"command not found: {spec.argv[0]!r} is not on PATH ({spec.env.get('PATH', '')}); pass the full path "
            "or run it through the shell (a string command)",
            code="command_not_found",
        )
    if isinstance(exc, PermissionError):
        return ToolError(f"cannot execute {spec.argv[0]!r}: permission denied", code="permission_denied")
    return ToolError(f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}", code="spawn_failed")


def resolve_program(spec: CommandSpec) -> str:
    """Find the program as execvp would, so a missing one is a clear error, not a launcher's exit 127."""
    program = spec.argv[0]
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(spec.cwd, program)
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", program)
        return program
    found = shutil.which(program, path=spec.env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", program)
    return found


class PipeProcess:
    """A child on pipes, started here (``spawn``) or by a sandbox's fast path (``launch``)."""

    def __init__(self, pid: int, stdin: int | None, stdout: int, stderr: int,
                 wait: Callable[[], Awaitable[int]], release: Callable[[], None] | None = None) -> None:
        self.pid = pid
        self._stdin = stdin
        self.fds = {"stdout": stdout, "stderr": stderr}
        for fd in (stdout, stderr, *([stdin] if stdin is not None else [])):
            os.set_blocking(fd, False)
        self._wait = wait
        self._release = release
        self._write_lock = anyio.Lock()

    @classmethod
    def spawn(cls, spec: CommandSpec, group: Path | None = None, limit: Path | None = None) -> PipeProcess:
        """Start ``spec``; with ``group``, the command joins that cgroup (and ``limit``, its pids
        mirror) before it runs."""
        try:
            check_cwd(spec.cwd)
            resolve_program(spec)
            command = wrap_argv(group, spec.argv, limit)
            argv = [SETPRIV, "--pdeathsig", "TERM", "--", *command] if SETPRIV else command
            parent = os.getpid()
            popen = subprocess.Popen(
                argv,
                cwd=spec.cwd,
                env=spec.env,
                stdin=subprocess.PIPE if spec.interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=spec.pass_fds,
                preexec_fn=None if SETPRIV else (lambda: arm_parent_death_signal(parent)),
            )
        except OSError as exc:
            raise spawn_error(exc, spec) from exc
        pidfd = os.pidfd_open(popen.pid)

        async def wait() -> int:
            code = await wait_exit(popen.pid, pidfd)
            popen.returncode = code  # reaped here; Popen must not wait for it again
            return code

        # The Popen object keeps the pipes open; take our own descriptors for them.
        stdin = os.dup(popen.stdin.fileno()) if spec.interactive and popen.stdin else None
        fds = (stdin, os.dup(popen.stdout.fileno()), os.dup(popen.stderr.fileno()))
        for stream in (popen.stdin, popen.stdout, popen.stderr):
            if stream is not None:
                stream.close()
        return cls(popen.pid, *fds, wait, lambda: os.close(pidfd))

    @classmethod
    async def launch(cls, spec: CommandSpec, sandbox: SandboxFastPath, layout: SandboxLayout) -> PipeProcess:
        """Start through a sandbox's fast path: we make the pipes, it makes the process."""
        child_in = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) if not spec.interactive else None
        ours_in = None
        if spec.interactive:
            child_in, ours_in = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            launched = await sandbox.launch(spec, layout, (child_in, out_w, err_w))
        except BaseException:
            for fd in (ours_in, out_r, err_r):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (child_in, out_w, err_w):
                os.close(fd)
        return cls(launched.pid, ours_in, out_r, err_r, launched.wait, launched.release)

    async def read(self, stream: str) -> bytes:
        return await read_some(self.fds[stream], READ_CHUNK)

    async def write(self, data: bytes) -> None:
        if self._stdin is None:
            raise ToolError("this session has no stdin (start it with interactive=true or tty=true)", code="no_stdin")
        async with self._write_lock:
            try:
                await write_all(self._stdin, data)
            except BrokenPipeError:
                raise ToolError("the process closed its stdin", code="stdin_closed") from None

    def close_stdin(self) -> None:
        if self._stdin is not None:
            os.close(self._stdin)
        self._stdin = None

    def resize(self, rows: int, cols: int) -> None:
        raise ToolError("resize needs a terminal session (exec with tty=true)", code="not_a_terminal")

    def signal_group(self, signum: int) -> None:
        signal_group(self.pid, signum)

    async def wait(self) -> int:
        return await self._wait()

    def close(self) -> None:
        self.close_stdin()
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
        if self._release is not None:
            self._release()

"""Process hardening of the helper, checked from outside while it runs (the hardening itself,
:mod:`codespace.contract.hardening`, is tested with the core)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from codespace_linux_sandbox.backend import HELPER_SCRIPT
from conftest import READ_ONLY, make_env

from codespace.processes.kill import kill_session


def _wait_for_output(proc: subprocess.Popen, text: bytes, timeout: float = 20) -> bytes:
    os.set_blocking(proc.stdout.fileno(), False)
    seen, deadline = b"", time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, seen
        seen += proc.stdout.read() or b""
        time.sleep(0.01)
    return seen


def _payloads_on_pipes(spec) -> tuple[dict[str, str], list[int]]:
    """The helper's environment and inherited descriptors for ``spec`` (a ``wrap`` result), as the host
    makes them: each payload on a pipe of its own."""
    env, fds = dict(spec.env), []
    for name, payload in spec.inherit.items():
        r, w = os.pipe()
        os.write(w, payload)
        os.close(w)
        env[f"CODESPACE_FD_{name.upper()}"] = str(r)
        fds.append(r)
    return env, fds


def test_running_helper_is_hardened_and_keeps_the_commands_ld_variables(sandbox_env):
    proc = sandbox_env.popen(["/bin/sh", "-c", 'echo "LD_FOO=$LD_FOO"; echo ready; sleep 30'],
                             env={"LD_FOO": "kept-for-the-command"})
    try:
        seen = _wait_for_output(proc, b"ready")
        time.sleep(0.1)  # bubblewrap engine: hardening overlaps bwrap's set-up
        with open(f"/proc/{proc.pid}/limits") as f:
            core = next(line for line in f if line.startswith("Max core file size"))
        assert core.split()[4:6] == ["0", "0"]
        if os.geteuid() == 0:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            assert not any(item.startswith(b"LD_") for item in environ)
        else:  # non-dumpable: its environment is root's to read, not our uid's
            with pytest.raises(PermissionError):
                open(f"/proc/{proc.pid}/environ", "rb")
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"kept-for-the-command" not in f.read()  # the environment travels in the handshake
    finally:
        kill_session(proc.pid, signal.SIGKILL)  # as the registry does
        proc.communicate(timeout=20)
    assert b"LD_FOO=kept-for-the-command" in seen


def _system_python() -> str | None:
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to start the helper as another user")
def test_helper_is_not_dumpable(base):
    """Run as an unprivileged user (where dumpability shows): the /proc/<pid> files of a
    non-dumpable process belong to root instead of the process's user."""
    python = _system_python()
    if python is None or shutil.which("bwrap") is None:
        pytest.skip("needs a system python3 readable by 'nobody' and bwrap")
    if not all(os.access(p, os.R_OK) for p in (HELPER_SCRIPT,)):
        pytest.skip("the helper is not readable by other users here")
    from conftest import require_engine

    require_engine("bubblewrap")
    env = make_env(base, "bubblewrap", READ_ONLY)
    for path in (base, env.ws, env.ws / "sub", env.outside, base / "home"):
        os.chmod(path, 0o755)
    spec = env.spec(["/bin/sh", "-c", "echo ready; sleep 30"])
    child_env, fds = _payloads_on_pipes(spec)

    def drop_to_nobody() -> None:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    proc = subprocess.Popen([python, "-I", "-S", HELPER_SCRIPT], cwd=spec.cwd, env=child_env, pass_fds=fds,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=drop_to_nobody,  # noqa: PLW1509
                            start_new_session=True)
    for fd in fds:
        os.close(fd)
    try:
        try:
            _wait_for_output(proc, b"ready")
        except AssertionError:
            proc.kill()
            pytest.skip(f"the helper cannot run as nobody here: {proc.communicate()[1][-300:]!r}")
        time.sleep(0.1)
        with open(f"/proc/{proc.pid}/status") as f:
            uid = next(line for line in f if line.startswith("Uid:")).split()[1]
        assert uid == "65534"
        assert os.stat(f"/proc/{proc.pid}/status").st_uid == 0  # non-dumpable
        with open(f"/proc/{proc.pid}/limits") as f:
            assert any(line.startswith("Max core file size") and line.split()[4:6] == ["0", "0"] for line in f)
    finally:
        kill_session(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=20)


def test_the_helper_hardens_itself_without_importing_the_core(sandbox_env):
    """The core's hardening module comes from its file (core_hardening): neither the core's packages
    nor typing are imported on the way, and the command still runs."""
    spec = sandbox_env.spec(["/bin/true"])
    env, fds = _payloads_on_pipes(spec)
    try:
        run = subprocess.run([spec.argv[0], "-X", "importtime", *spec.argv[1:]], cwd=spec.cwd, env=env,
                             pass_fds=fds, capture_output=True, text=True, timeout=60, check=False)
    finally:
        for fd in fds:
            os.close(fd)
    assert run.returncode == 0, run.stderr[-2000:]
    modules = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "codespace_linux_sandbox.entry" in modules
    assert not [m for m in modules if m.split(".")[0] in ("codespace", "typing", "pydantic")], sorted(modules)


def test_a_helper_that_cannot_load_the_hardening_module_does_not_run():
    from codespace_linux_sandbox.backend import helper_argv
    from codespace_linux_sandbox.core_hardening import ENV

    run = subprocess.run(helper_argv(), env={ENV: "/nonexistent/hardening.py"}, capture_output=True, text=True,
                         timeout=30, check=False)
    assert run.returncode == 125
    assert "cannot harden this process" in run.stderr and "/nonexistent/hardening.py" in run.stderr

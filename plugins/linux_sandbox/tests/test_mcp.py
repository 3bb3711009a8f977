"""Real MCP sessions (both client modes): exec through each engine, denial feedback, exit
codes and signals, workspace_info and doctor."""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from codespace_linux_sandbox.backend import interpreter, may_make_pid_namespaces
from codespace_linux_sandbox.limits import PROTECTED_BELOW
from codespace_linux_sandbox.run_as import choose, mounts_possible
from conftest import live_pids_in, require_engine

from codespace.doctor import run_checks
from codespace.testing import build_app, call_error, call_ok, connect

pytestmark = pytest.mark.anyio
HAS_PTY = importlib.util.find_spec("codespace_pty") is not None


@pytest.fixture
def app_for(make_app, ws: Path, engine: str):
    def make(policy: str = "", plugins: tuple[str, ...] = ("linux_sandbox",)):
        (ws / ".git").mkdir(exist_ok=True)
        (ws / "sub").mkdir(exist_ok=True)  # Landlock: new entries directly in the root are refused
        return make_app(policy + f'\n[sandbox]\nengine = "{engine}"\n', plugins=plugins)

    return make


async def test_exec_is_sandboxed(app_for, base, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        out = await call_ok(client, "exec", {"command": ["/bin/sh", "-c", ("echo hi > sub/f && cat sub/f; "
                                                         "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status")]})
        assert out["sandboxed"] is True and out["exit_code"] == 0, out
        assert out["output"].startswith("hi\n") and "NoNewPrivs:\t1" in out["output"] and "Seccomp:\t2" in out["output"]
        assert (base / "ws" / "sub" / "f").read_text() == "hi\n"
        assert out.get("sandbox_denied") is None


async def test_denial_feedback_names_the_rule(app_for, base, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        etc = await call_ok(client, "exec", {"command": "touch /etc/codespace-probe"})
        assert etc["exit_code"] != 0 and etc["sandbox_denied"] is True
        assert etc["sandbox_rule"] == "filesystem.paths['/']"
        # argv form: bash's own messages start with "/bin/bash: line 1:", and the core's heuristic
        # takes the first refused path it finds (see README "Core notes").
        git = await call_ok(client, "exec", {"command": ["touch", f"{base}/ws/.git/config"]})
        assert git["sandbox_denied"] is True and git["sandbox_rule"] == "filesystem.protected", git
        net = await call_ok(client, "exec", {"command": [
            interpreter(), "-I", "-S", "-c", "import urllib.request; urllib.request.urlopen('http://example.com', timeout=5)"]})
        assert net["sandbox_denied"] is True and net["sandbox_rule"] == "network.access", net
        fine = await call_ok(client, "exec", {"command": "echo fine; exit 2"})
        assert fine["sandbox_denied"] is False and fine.get("sandbox_rule") is None, fine["output"]


async def test_exit_codes_and_signals(app_for, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        seven = await call_ok(client, "exec", {"command": "exit 7"})
        assert seven["exit_code"] == 7
        term = await call_ok(client, "exec", {"command": "kill -TERM $$"})
        assert term["exit_code"] == 143
        sigsys = await call_ok(client, "exec", {"command": "kill -SYS $$"})
        assert sigsys["exit_code"] == 159 and sigsys["sandbox_denied"] is True
        assert sigsys["sandbox_rule"] == "sandbox seccomp"


async def test_terminate_a_sandboxed_session(app_for, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        started = await call_ok(client, "exec", {"command": ["sleep", "30"], "yield_ms": 300})
        assert started["running"] is True
        stopped = await call_ok(client, "terminate", {"session_id": started["session_id"], "grace_ms": 5000})
        assert stopped["running"] is False and stopped["exit_code"] == 143 and stopped["signal"] == "SIGTERM"


async def test_timeouts_of_a_few_milliseconds_leave_nothing_running(app_for, engine, mode):
    """The watchdog's SIGKILL lands while the sandbox is still being built: nothing of the
    command may outlive the call (bwrap's init used to, running the command to its end)."""
    if engine == "bubblewrap" and not may_make_pid_namespaces():
        pytest.skip("without CAP_SYS_ADMIN or user namespaces: the gap workspace_info lists under cannot_enforce")
    marker = "sleep 86393"
    try:
        async with connect(app_for(), mode=mode) as client:
            for timeout_ms in range(1, 16):
                out = await call_ok(client, "exec", {"command": f"exec {marker}", "timeout_ms": timeout_ms})
                assert out["timed_out"] is True and out["exit_code"] == 124, out
        deadline = time.monotonic() + 5
        while live_pids_in([marker]) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert live_pids_in([marker]) == []
    finally:
        for pid in live_pids_in([marker]):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.in_process  # the helpers' parent must be this process
async def test_pipe_sessions_take_the_fast_path(app_for, engine, mode):
    """exec on pipes forks from the warm helper: the session's leader is a child of the server;
    terminate's INT reaches the command; nothing of the session is left afterwards."""
    from codespace.processes.kill import members

    async with connect(app_for(), mode=mode) as client:
        started = await call_ok(client, "exec", {
            "command": "trap 'echo interrupted; exit 130' INT; echo ready; while :; do sleep 0.05; done",
            "yield_ms": 500})
        assert started["running"] and "ready" in started["output"], started
        pid = started["pid"]
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        assert int(fields[1]) == os.getpid() and int(fields[3]) == pid
        info = await call_ok(client, "workspace_info")
        assert "commands fork from the warm helper" in info["sandbox"]["detail"]
        stopped = await call_ok(client, "terminate", {"session_id": started["session_id"], "signal": "INT"})
        assert "interrupted" in stopped["output"] and stopped["exit_code"] == 130, stopped
        assert members(pid) == [] and not os.path.exists(f"/proc/{pid}")


async def test_workspace_under_tmp(tmp_path, engine, mode):
    """Workspaces under /tmp still work although the sandbox gets a private /tmp."""
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    app = build_app(ws, state_dir=tmp_path / "state", policy=f'[sandbox]\nengine = "{engine}"\n',
                    plugins=("linux_sandbox",))
    async with connect(app, mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "echo ok > d/f && cat d/f && echo tmp > ${TMPDIR:-/tmp}/t && cat ${TMPDIR:-/tmp}/t"})
        assert out["output"] == "ok\ntmp\n" and (ws / "d" / "f").read_text() == "ok\n"
        top = await call_ok(client, "exec", {"command": "touch new-top-level-file"})
        # Documented: the Landlock root is split around its protected names, unless the server
        # is root and read-only mounts keep them instead (landlock_mounts).
        if engine == "landlock" and not mounts_possible(choose(ws, 65534, 65534)):
            assert top["exit_code"] == 1 and top["sandbox_denied"] is True
        else:
            assert top["exit_code"] == 0 and (ws / "new-top-level-file").exists()


async def test_workspace_info_states_engine_and_limits(app_for, engine, mode):
    async with connect(app_for(), mode=mode) as client:
        info = await call_ok(client, "workspace_info")
        sandbox = info["sandbox"]
        assert sandbox["engine"] == engine and sandbox["available"] is True
        assert sandbox["landlock_abi"] is not None
        # bubblewrap enforces every rule here but protected names not yet there below the top of the
        # workspace (its list also names a failed /proc preflight, or, without CAP_SYS_ADMIN or user
        # namespaces, that a helper killed during set-up can leave its command running)
        assert PROTECTED_BELOW in sandbox["cannot_enforce"]
        rest = [line for line in sandbox["cannot_enforce"] if line != PROTECTED_BELOW]
        if engine == "landlock":
            assert rest
        elif may_make_pid_namespaces():
            assert rest == []
        else:
            assert [line for line in rest if "CAP_SYS_ADMIN" in line], sandbox
        assert "fast path" in sandbox["detail"]
        assert info["server"]["protocols"]["sandbox_handshake"] == 1


def test_doctor_reports_the_engine(app_for, engine):
    checks = {c.name: c for c in run_checks(app_for())}
    assert checks["sandbox engine"].ok and engine in checks["sandbox engine"].detail
    assert "Landlock ABI" in checks["sandbox engine"].detail
    assert checks["sandbox seccomp (libseccomp)"].ok
    assert checks["sandbox cannot enforce"].detail


@pytest.mark.in_process  # patches this process's engine choice
async def test_required_mode_refuses_when_no_engine_works(make_app, mode, monkeypatch):
    from codespace_linux_sandbox import backend

    monkeypatch.setattr(backend, "choose_engine", lambda preference: backend.EngineChoice(
        "bubblewrap", False, "bwrap not found on PATH (apt-get install bubblewrap)"))
    app = make_app('[sandbox]\nmode = "required"\n')
    async with connect(app, mode=mode) as client:
        refused = await call_error(client, "exec", {"command": ["true"]})
        assert refused["rule"] == "sandbox.mode" and "bwrap not found" in refused["message"]
    auto = make_app()
    async with connect(auto, mode=mode) as client:
        out = await call_ok(client, "exec", {"command": ["true"]})
        assert out["sandboxed"] is False and "bwrap not found" in out["note"]


async def test_command_not_found_like_unsandboxed(app_for, mode, engine):
    async with connect(app_for(), mode=mode) as client:
        missing = await call_error(client, "exec", {"command": ["no-such-program-xyz"]})
        assert missing["code"] == "command_not_found"


async def test_a_cwd_that_is_a_file_is_named_as_such(app_for, ws, mode, engine):
    """Found by testing from outside: a cwd naming a regular file was said not to exist."""
    (ws / "notes.txt").write_text("x")
    async with connect(app_for(), mode=mode) as client:
        error = await call_error(client, "exec", {"command": ["pwd"], "cwd": "notes.txt"})
        missing = await call_error(client, "exec", {"command": ["pwd"], "cwd": "nowhere"})
    assert "notes.txt: it is not a directory" in error["message"], error
    assert "nowhere: the directory does not exist" in missing["message"], missing


@pytest.mark.skipif(not HAS_PTY, reason="codespace-pty is not installed (tty sessions need it)")
async def test_tty_session_in_the_sandbox(make_app, base, engine, mode):
    require_engine(engine)
    app = make_app(f'[sandbox]\nengine = "{engine}"\n', plugins=("linux_sandbox", "pty"))
    async with connect(app, mode=mode) as client:
        out = await call_ok(client, "exec", {"command": "test -t 0 && test -t 1 && echo on-a-tty; exit 4", "tty": True,
                                             "yield_ms": 10000})
        assert "on-a-tty" in out["output"] and out["exit_code"] == 4 and out["sandboxed"] is True
        session = await call_ok(client, "exec", {
            "command": "trap 'echo interrupted; exit 130' INT; echo ready; while :; do sleep 0.1; done",
            "tty": True, "yield_ms": 2000})
        assert "ready" in session["output"] and session["running"]
        done = await call_ok(client, "write_stdin", {"session_id": session["session_id"], "chars": "\x03",
                                                     "yield_ms": 5000})
        assert "interrupted" in done["output"] and done["exit_code"] == 130, done
    assert os.path.isdir(base / "ws")


async def test_the_policy_limits_a_commands_processes(make_app, ws, engine, mode):
    """[sandbox] max_processes from the policy file reaches the helper, under either engine (the
    Landlock engine needs user namespaces; it names the limit in cannot_enforce without them)."""
    from codespace_linux_sandbox.engine_choice import may_make_user_namespaces

    from test_process_limit import FORKS

    (ws / ".git").mkdir(exist_ok=True)
    app = make_app(f'[sandbox]\nengine = "{engine}"\nmax_processes = 40\n')
    async with connect(app, mode=mode) as client:
        info = await call_ok(client, "workspace_info")
        named = [line for line in info["sandbox"]["cannot_enforce"] if "max_processes (40)" in line]
        if engine == "landlock" and not may_make_user_namespaces():
            assert named, info["sandbox"]["cannot_enforce"]
            return
        assert not named
        out = await call_ok(client, "exec", {"command": [interpreter(), "-I", "-S", "-c", FORKS]})
        assert "refused 11" in out["output"], out
        assert int(out["output"].split("forked ", 1)[1].split()[0]) < 40, out

"""Hostile: a sandboxed command never acts as host root, whatever uid the server runs as
(issue 12, item 1). Both engines, both starts, the server (this test process) as root; the
unprivileged server is covered through real MCP sessions in ``test_identity_mcp.py``.

Host kernel state is never changed: writability is asked with ``test -w`` and with an open
for writing that writes nothing (``: >> file``), and the host's value is checked afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from codespace_linux_sandbox.backend import LinuxSandbox
from conftest import Env, live_pids_in, make_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server-as-root case (CI runs as root)")

KNOBS = ("/proc/sys/fs/lease-break-time", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname",
         "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger",
         "/proc/sys/net/ipv4/ping_group_range")  # per network namespace: the sandbox's own under bubblewrap


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _running(env: Env, marker: str, program: str = "sleep") -> tuple[object, int]:
    proc = env.popen(["/bin/sh", "-c", f"{program} {marker}; echo done"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [p for p in live_pids_in([marker])
                 if open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[:2] == [program.encode(), marker.encode()]]
        if found:
            return proc, found[0]
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"the sandboxed {program} never showed up: {proc.communicate()}")


def test_host_kernel_knobs_are_not_writable(sandbox_env: Env):
    before = {k: open(k).read() for k in KNOBS if os.access(k, os.R_OK)}
    script = "; ".join(f"test -w {k} && echo WRITABLE {k}; (true >> {k}) 2>/dev/null && echo OPENED {k}" for k in KNOBS)
    code, out, err = sandbox_env.run(["/bin/sh", "-c", script + "; true"])
    assert code == 0, err
    assert "WRITABLE" not in out and "OPENED" not in out, out
    assert {k: open(k).read() for k in before} == before


def test_sys_is_hidden_or_read_only(sandbox_env: Env):
    code, out, _ = sandbox_env.run(["/bin/sh", "-c", "for f in /sys/kernel/mm/transparent_hugepage/enabled "
                                    "/sys/kernel/uevent_helper /sys/power/state; do test -w $f && echo W $f; done; true"])
    assert "W " not in out, out


def test_the_command_is_an_unprivileged_host_uid(sandbox_env: Env):
    marker = f"{400 + os.getpid() % 100}.{len(sandbox_env.start)}1"
    proc, pid = _running(sandbox_env, marker)
    try:
        status = _status(pid)
        uids, gids = status["Uid"].split(), status["Gid"].split()
        assert "0" not in uids and "0" not in gids, status
        assert "0" not in status["Groups"].split(), status
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0, status
        assert status["NoNewPrivs"].strip() == "1"
        assert uids[0] == str(sandbox_env.sandbox.run_as_uid)  # the workspace is root's: the dedicated uid
    finally:
        os.kill(pid, 9)  # the shell then ends, and so does the helper
        proc.communicate(timeout=30)


def test_the_command_inherits_no_descriptor_but_its_stdio(sandbox_env: Env):
    """The warm helper receives the id mapping's user namespace by SCM_RIGHTS; no descriptor it
    (or bwrap) holds may reach the command."""
    code, out, err = sandbox_env.run(["/bin/sh", "-c", "for f in /proc/self/fd/*; do echo \"$f $(readlink $f)\"; done"])
    assert code == 0, err
    # sh's glob reads /proc/self/fd through one descriptor of its own, gone when readlink runs
    extra = [line for line in out.splitlines() if line.split()[0].rsplit("/", 1)[1] not in ("0", "1", "2")
             and len(line.split()) > 1]
    assert extra == [], out


def test_a_setuid_root_binary_gives_no_root(sandbox_env: Env):
    suid = sandbox_env.outside / "suid-sleep"
    shutil.copy("/bin/sleep", suid)
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    marker = f"{500 + os.getpid() % 100}.{len(sandbox_env.start)}2"
    proc, pid = _running(sandbox_env, marker, program=str(suid))
    try:
        assert "0" not in _status(pid)["Uid"].split(), _status(pid)
    finally:
        os.kill(pid, 9)  # the shell then ends, and so does the helper
        proc.communicate(timeout=30)


def test_files_the_command_creates_belong_to_the_workspace_owner(sandbox_env: Env):
    code, out, err = sandbox_env.run(["/bin/sh", "-c", "mkdir sub/made && echo x > sub/made/file && "
                                      "ln -s file sub/made/link && mkfifo sub/made/fifo && ls -ln sub/made"])
    assert code == 0, err
    owner = os.stat(sandbox_env.ws)
    for name in ("made", "made/file", "made/link", "made/fifo"):
        st = os.lstat(sandbox_env.ws / "sub" / name)
        assert (st.st_uid, st.st_gid) == (owner.st_uid, owner.st_gid), (name, st)
    shutil.rmtree(sandbox_env.ws / "sub" / "made")  # the owner (root here) removes them as usual


def test_a_user_owned_workspace_runs_its_commands_as_that_user(base, engine, start):
    env = make_env(base, engine, start=start)
    base.chmod(0o755)  # the owner must reach the workspace: no id mapping gives root's rights here
    for path in [env.ws, *env.ws.rglob("*")]:
        os.lchown(path, 1000, 1000)
    env.sandbox = LinuxSandbox.for_workspace(env.workspace)
    code, out, err = env.run(["/bin/sh", "-c", "id -u; touch sub/mine; test -w /proc/sys/fs/lease-break-time "
                              "&& echo WRITABLE; true"])
    assert code == 0, err
    assert out.split()[0] == "1000" and "WRITABLE" not in out, out
    st = os.stat(env.ws / "sub" / "mine")
    assert (st.st_uid, st.st_gid) == (1000, 1000)


def test_chown_mount_and_host_signals_are_refused(sandbox_env: Env):
    victim = subprocess.Popen(["sleep", "60"])  # a host process of root's
    try:
        (sandbox_env.ws / "sub" / "f").write_text("x")
        script = (f"chown 1000 sub/f && echo CHOWNED; mount -t tmpfs none sub 2>/dev/null && echo MOUNTED; "
                  f"kill -0 {victim.pid} 2>/dev/null && echo SIGNALLED; cat /proc/{victim.pid}/environ >/dev/null "
                  f"2>&1 && echo ENVIRON; true")
        code, out, err = sandbox_env.run(["/bin/sh", "-c", script])
        assert code == 0, err
        for word in ("CHOWNED", "MOUNTED", "SIGNALLED", "ENVIRON"):
            assert word not in out, out
        assert victim.poll() is None
        assert os.stat(sandbox_env.ws / "sub" / "f").st_uid == 0
    finally:
        victim.kill()
        victim.wait()


def test_the_helper_refuses_to_run_a_command_as_root_without_run_as(sandbox_env: Env):
    """A handshake from a server that did not name the command's ids is refused (fail closed)."""
    hs = sandbox_env.sandbox.handshake(sandbox_env.command(["/bin/true"]),
                                       __import__("codespace.sandboxing", fromlist=["layout_for"]).layout_for(
                                           sandbox_env.workspace))
    raw = hs.model_copy(update={"options": hs.options.model_copy(update={"run_as": None})}).encode()
    from codespace_linux_sandbox import handshake

    with pytest.raises(handshake.HandshakeError, match="run_as"):
        handshake.decode(raw)


def test_without_idmapped_mounts_a_root_owned_workspace_is_refused_not_run_as_root(sandbox_env: Env):
    """A helper that may not make the idmapped view (no CAP_SYS_ADMIN) refuses the command with
    the reason; it never falls back to running it as root."""
    if sandbox_env.start != "wrap" or not shutil.which("setpriv"):
        pytest.skip("a helper started per command, under setpriv")
    proc = sandbox_env.popen(["/bin/sh", "-c", "touch sub/ran"], wrapper=("setpriv", "--bounding-set", "-sys_admin", "--"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 125, err
    assert b"unprivileged" in err and b"CLONE_NEWNS" in err, err
    assert not (sandbox_env.ws / "sub" / "ran").exists()


@pytest.fixture
def ramfs(base):
    """A file system that takes no idmapped mount (ramfs), mounted for this test only."""
    point = base / "ramfs"
    point.mkdir()
    if subprocess.run(["mount", "-t", "ramfs", "none", str(point)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a ramfs here")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_workspace_without_idmapped_mounts_is_named_and_refused(ramfs, engine, start):
    env = make_env(ramfs, engine, start=start)
    info = env.sandbox.info()
    assert any("takes no idmapped mount" in line and "refused" in line for line in info.cannot_enforce), info
    code, _, err = env.run(["/bin/sh", "-c", "touch sub/ran"])
    assert code == 125 and "idmapped" in err, err
    assert not (env.ws / "sub" / "ran").exists()


def test_doctor_and_workspace_info_name_the_commands_identity(make_app, base, engine):
    from codespace.doctor import run_checks

    app = make_app(f'[sandbox]\nengine = "{engine}"\n')
    check = {c.name: c for c in run_checks(app)}["sandbox command identity"]
    assert check.ok and "uid 65534" in check.detail and "never host root" in check.detail, check
    (base / "other").mkdir()
    env = make_env(base / "other", engine)
    assert "never host root" in env.sandbox.info().detail

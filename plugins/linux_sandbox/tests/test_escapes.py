"""Escape attempts, in both engines: each must leave the host exactly as the policy allows."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import stat
import subprocess
import termios
import time

import pytest
from codespace_linux_sandbox.backend import interpreter
from codespace_linux_sandbox.helper import SETUP_FAILED_EXIT_CODE
from conftest import TESTS


def sh(env, script: str) -> tuple[int, str]:
    code, out, err = env.run(["/bin/sh", "-c", script])
    return code, out + err


def test_symlink_in_writable_root_pointing_outside(sandbox_env):
    env = sandbox_env
    _code, _out = sh(env, f"ln -s {env.outside} sub/out && echo x > sub/out/escaped; "
                        "ln -s /etc/passwd sub/pw && echo x >> sub/pw; exit 0")
    assert not (env.outside / "escaped").exists()
    with open("/etc/passwd") as passwd:
        assert "x" not in passwd.read().splitlines()[-1:]


def test_protected_path_through_a_symlink_fails_closed(sandbox_env):
    env = sandbox_env
    (env.ws / "decoy").mkdir()
    (env.ws / ".codex").symlink_to(env.ws / "decoy")
    code, out = sh(env, "echo x > .codex/config.toml")
    assert code == SETUP_FAILED_EXIT_CODE
    assert "crosses the symbolic link" in out and ".codex" in out
    assert not (env.ws / "decoy" / "config.toml").exists()


def test_hard_links_cannot_carry_writes_out(sandbox_env):
    env = sandbox_env
    (env.outside / "target").write_text("original\n")
    sh(env, f"ln .git/config sub/cfg; echo evil >> sub/cfg; ln {env.outside}/target sub/t; echo evil >> sub/t; "
            "ln /etc/hostname sub/h; exit 0")
    assert (env.ws / ".git" / "config").read_text() == "[core]\n"
    assert (env.outside / "target").read_text() == "original\n"
    for made in ("cfg", "t", "h"):  # whatever the shell created there is a new file, never a link
        path = env.ws / "sub" / made
        assert not path.exists() or path.stat().st_nlink == 1
    assert (env.ws / ".git" / "config").stat().st_nlink == 1 and (env.outside / "target").stat().st_nlink == 1


def test_what_the_command_reads_of_pid_1(sandbox_env):
    """PID 1 is bwrap under bubblewrap (its own PID namespace), the host's init under Landlock.
    Neither shows the command's environment or the host's: bwrap gets its options through a
    memfd and runs with an empty environment; the host's init is not the command's to read."""
    secret = "codespace-" + os.urandom(6).hex()
    code, out, err = sandbox_env.run(
        ["/bin/sh", "-c", "tr '\\0' ' ' </proc/1/cmdline; echo; echo ENVIRON; tr '\\0' '\\n' </proc/1/environ"],
        env={"CODESPACE_SECRET": secret})
    cmdline, _, environ = out.partition("ENVIRON\n")
    assert secret not in out + err
    words = cmdline.split()
    if os.path.basename(words[0]) == "bwrap":
        assert words[1] == "--args" and words[2].isdigit() and words[3] == "--", cmdline  # then the command
        assert environ == "" and code == 0, (environ, err)
    else:  # the shell could not open the host init's environment
        assert code != 0 and "Permission denied" in err and environ == "", (code, environ, err)


def test_proc_self_root(sandbox_env):
    env = sandbox_env
    sh(env, f"echo x > /proc/self/root{env.outside}/via-root; echo x > /proc/1/root{env.outside}/via-pid1; exit 0")
    assert not (env.outside / "via-root").exists() and not (env.outside / "via-pid1").exists()


def test_mount_unshare_setns_inside(sandbox_env):
    env = sandbox_env
    _code, out = sh(env, f"""
        mount -t tmpfs none sub && echo MOUNTED-TMPFS
        mount --bind sub {env.outside} && echo MOUNTED-BIND
        unshare -rm sh -c 'mount --bind {env.ws}/sub {env.outside} && echo x > {env.outside}/via-userns' 2>/dev/null
        nsenter --target 1 --mount --net true && echo ENTERED
        exit 0""")
    assert "MOUNTED" not in out and "ENTERED" not in out
    assert not (env.outside / "via-userns").exists()
    assert os.listdir(env.outside) == []


def test_setuid_binaries_gain_nothing(sandbox_env):
    env = sandbox_env
    _code, out = sh(env, "/usr/bin/mount -t tmpfs none sub && echo MOUNTED; "
                        "/usr/bin/su root -c 'echo SU-RAN; grep CapEff /proc/self/status' 2>&1; exit 0")
    assert "MOUNTED" not in out
    for line in out.splitlines():
        if line.startswith("CapEff"):
            assert line.split()[1] == "0000000000000000"


def test_no_set_id_bits_in_the_workspace(sandbox_env):
    """A root server's commands create files the host sees as root's (the id mapping): a set-user-ID
    bit on one would hand host root to any local user who runs it, on a host mount without nosuid.
    Every call that sets a mode is refused those bits (EPERM); other modes still work."""
    env = sandbox_env
    code, out, err = env.run([interpreter(), "-I", "-S", str(TESTS / "setid_probe.py"), "sub/setid"])
    assert code == 0, err
    result = json.loads(out)
    assert result.pop("chmod plain") == result.pop("openat plain") == "ok", result
    assert result and set(result.values()) == {"errno 1"}, result
    for path in (env.ws / "sub" / "setid").iterdir():
        assert not path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID), path


def test_no_user_namespace_inside(sandbox_env):
    """A user namespace of the command's own would give it every capability there: mounts and chroot
    that change what a path names to the helper, which resolves the command's paths through
    /proc/<pid>/root (the Unix-socket broker), and file capabilities. unshare and clone with
    CLONE_NEWUSER fail with EPERM; clone3, whose flags seccomp cannot read, with ENOSYS (the C
    library then falls back to clone)."""
    script = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
              "print(libc.syscall(435, None, 0), ctypes.get_errno())\n"
              "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nprint(os.waitpid(pid, 0)[1])\n")
    code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", script])
    assert code == 0, err
    assert out.split() == ["-1", "1", "-1", "38", "0"], (out, err)  # fork (clone) without the flag works
    _code, out = sh(sandbox_env, "unshare -U true && echo UNSHARED; unshare -rm true && echo UNSHARED; exit 0")
    assert "UNSHARED" not in out, out


def test_metadata_of_files_outside_the_writable_roots_stays(sandbox_env):
    """Landlock has no right for chmod, chown, extended attributes or times, and a root server's
    commands own every root-owned file through the id mapping: a command made a root-owned 0600
    file outside the writable roots 0666 (say /etc/passwd). The view outside them is read-only."""
    env = sandbox_env
    if env.sandbox.preference == "landlock" and os.geteuid() != 0:
        pytest.skip("an unprivileged server's Landlock commands may change their own files' metadata: "
                    "named in cannot_enforce (LANDLOCK_METADATA, next test)")
    target = env.outside / "target"
    target.write_text("root only\n")
    os.chmod(target, 0o600)
    os.utime(target, (1_000_000_000, 1_000_000_000))
    before = target.stat()
    script = (f"chmod 0666 {target}; chown 65534 {target}; touch -d 2001-01-01 {target}; "
              f"setfattr -n user.x -v 1 {target} 2>/dev/null || {interpreter()} -I -S -c "
              f"\"import os; os.setxattr('{target}', 'user.x', b'1')\"; "
              "echo inside > sub/own && chmod 0700 sub/own && echo INSIDE-OK; exit 0")
    _code, out = sh(env, script)
    after = target.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_mtime) == (0o600, before.st_uid, before.st_mtime), out
    assert os.listxattr(target) == [], out
    assert "INSIDE-OK" in out and stat.S_IMODE((env.ws / "sub" / "own").stat().st_mode) == 0o700, out


def test_the_metadata_gap_is_named_where_no_read_only_view_closes_it():
    from codespace_linux_sandbox.limits import LANDLOCK_METADATA, cannot_enforce

    assert LANDLOCK_METADATA in cannot_enforce("landlock", 7)  # an unprivileged server's commands
    assert LANDLOCK_METADATA not in cannot_enforce("landlock", 7, read_only_view=True)  # a root server's
    assert LANDLOCK_METADATA not in cannot_enforce("bubblewrap", None)  # read-only binds


def test_no_kernel_keyrings(sandbox_env):
    """Keyrings are not namespaced: a key added by one command would be there for the next one
    and for the host's processes of the same uid."""
    script = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
              "print(libc.syscall(250, 0, -3, 0, 0, 0), ctypes.get_errno())\n"  # keyctl(GET_KEYRING_ID, session)
              "print(libc.syscall(248, b'user', b'codespace-test', b'x', 1, -3), ctypes.get_errno())\n")  # add_key
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers of x86_64")
    code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", script])
    assert code == 0, err
    assert out.split() == ["-1", "1", "-1", "1"], out


def test_no_signals_to_processes_outside(sandbox_env):
    abi = sandbox_env.sandbox.info().landlock_abi
    if sandbox_env.sandbox.preference == "landlock" and (abi or 0) < 6:
        pytest.skip(f"Landlock ABI {abi} < 6 cannot scope signals (listed in cannot_enforce)")
    victim = subprocess.Popen(["sleep", "600"])
    try:
        _code, out = sh(sandbox_env, f"kill -TERM {victim.pid} && echo KILLED; kill -KILL {victim.pid} && echo KILLED; exit 0")
        time.sleep(0.2)
        assert "KILLED" not in out
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_state_and_config_are_out_of_reach(sandbox_env):
    env = sandbox_env
    state = env.workspace.state_dir
    (state / "secret").write_text("token\n")
    policy = env.workspace.policy_path
    _code, out = sh(env, f"cat {state}/secret; echo x > {state}/evil; echo x >> {policy}; "
                        "mkdir -p .codespace && echo x > .codespace/policy.toml; exit 0")
    assert "token" not in out
    assert not (state / "evil").exists()
    assert "x" not in policy.read_text().splitlines()
    assert not (env.ws / ".codespace").exists()


def test_tiocsti_cannot_type_into_the_terminal(sandbox_env):
    """The command shares a terminal with the host side; TIOCSTI must not push input into it."""
    env = sandbox_env
    master, slave = pty.openpty()

    def make_controlling() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    script = ("import fcntl, termios, sys\n"
              "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'X')\n    print('INJECTED')\n"
              "except OSError as e:\n    print('refused', e.errno)\n")
    proc = env.popen([interpreter(), "-I", "-S", "-c", script], stdin=slave, stdout=subprocess.PIPE,
                     preexec_fn=make_controlling)
    os.close(slave)
    out, _ = proc.communicate(timeout=30)
    os.close(master)
    assert b"INJECTED" not in out and b"refused 1" in out  # EPERM


@pytest.mark.parametrize("target", ["/etc/escape", "/usr/escape", "/var/tmp/escape-{pid}"])
def test_writes_outside_every_writable_root_fail(sandbox_env, target):
    path = target.format(pid=os.getpid())
    sh(sandbox_env, f"echo x > {path}; exit 0")
    assert not os.path.exists(path)


def test_ptrace_of_a_sibling_is_refused(sandbox_env):
    _code, out = sh(sandbox_env, "sleep 5 & pid=$!; "
                                f"{interpreter()} -I -S -c \"import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); "
                                "r=l.ptrace(16, int(sys.argv[1]), None, None); print('attach', r, ctypes.get_errno())\" $pid; "
                                "kill $pid; exit 0")
    assert "attach -1 1" in out  # PTRACE_ATTACH fails with EPERM


def test_pid_namespace_hides_host_processes(base):
    from conftest import make_env, require_engine

    require_engine("bubblewrap")
    env = make_env(base, "bubblewrap")
    _code, out = sh(env, "ls /proc | grep -c '^[0-9]'")
    assert int(out.split()[0]) < 10

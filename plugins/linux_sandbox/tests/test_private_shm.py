"""/dev/shm: each command's own (bubblewrap; Landlock with a mount namespace of the command's own,
a root server with CAP_SYS_ADMIN), never the host's; where Landlock cannot give one, it is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from codespace_linux_sandbox.backend import interpreter
from codespace_linux_sandbox.limits import LANDLOCK_NO_SHM
from codespace_linux_sandbox.run_as import mounts_possible

MARKER = "codespace-private-shm-probe"
PROBE = (f"import multiprocessing, os; lock = multiprocessing.Lock(); lock.acquire(); lock.release(); "
         f"open('/dev/shm/{MARKER}', 'w').write('x'); print('SHM OK', sorted(os.listdir('/dev/shm')))")


def _private_shm_expected(env) -> bool:
    return env.sandbox.preference == "bubblewrap" or mounts_possible(env.sandbox.run_as())


def test_a_command_gets_a_private_dev_shm_or_the_gap_is_named(sandbox_env):
    host = Path("/dev/shm") / MARKER
    if host.exists():
        host.unlink()
    info = sandbox_env.sandbox.info()
    code, out, err = sandbox_env.run([interpreter(), "-I", "-S", "-c", PROBE])
    if not _private_shm_expected(sandbox_env):
        assert LANDLOCK_NO_SHM in info.cannot_enforce, info.cannot_enforce
        assert code != 0 and "SHM OK" not in out, (out, err)
        return
    assert LANDLOCK_NO_SHM not in info.cannot_enforce
    assert code == 0 and "SHM OK" in out, err
    assert not host.exists(), "the command wrote the host's /dev/shm"
    # and the next command starts with an empty one: nothing passes between commands
    code, out, err = sandbox_env.run(["/bin/sh", "-c", "ls -A /dev/shm | wc -l"])
    assert code == 0 and out.strip() == "0", (out, err)


def test_the_host_dev_shm_is_not_reachable(sandbox_env):
    """A file the host has in /dev/shm is not seen, and cannot be changed, by a command."""
    host = Path("/dev/shm") / (MARKER + "-host")
    host.write_text("host")
    os.chmod(host, 0o666)
    try:
        code, out, err = sandbox_env.run(["/bin/sh", "-c", f"cat /dev/shm/{host.name}; echo changed > /dev/shm/{host.name}"])
        assert host.read_text() == "host", (out, err)
        if _private_shm_expected(sandbox_env):
            assert "host" not in out, out
    finally:
        host.unlink()

"""A server that is not root: deny-read paths its uid can neither read nor search are not masked
(the command, that uid with no capabilities, could not open them; each mask costs bwrap a mount)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from conftest import require_engine

NOBODY = 65534


def _as_nobody(deny: list[str]) -> list[str]:
    """The deny-read paths that get a mask, computed in a child that has become uid/gid 65534."""
    from codespace_linux_sandbox.bwrap_argv import masked_deny_paths

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os.write(w, json.dumps([path for path, _ in masked_deny_paths(deny, own_uid=True)]).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_only_what_the_uid_could_open_keeps_its_mask():
    if os.geteuid() != 0:
        pytest.skip("becomes uid 65534 in a child: needs root")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as top:  # pytest's own is closed to 65534
        os.chmod(top, 0o755)
        _check_masks_kept(Path(top))


def _check_masks_kept(tmp_path: Path) -> None:
    shut = tmp_path / "shut"
    shut.write_text("secret")
    shut.chmod(0o600)  # root's: 65534 cannot read it
    readable = tmp_path / "readable"
    readable.write_text("secret")
    readable.chmod(0o644)
    closed_dir = tmp_path / "closed"
    closed_dir.mkdir(mode=0o700)
    searchable = tmp_path / "searchable"
    searchable.mkdir()
    searchable.chmod(0o711)  # not listable, but a known name inside can be opened: keep it masked
    missing = tmp_path / "missing"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    link_to_shut = tmp_path / "link-to-shut"
    link_to_shut.symlink_to(shut)
    deny = [str(p) for p in (shut, readable, closed_dir, searchable, missing, dangling, link_to_shut)]
    # missing and dangling: nothing there to hide, so no mask whoever asks
    assert _as_nobody(deny) == [str(p) for p in (readable, searchable)]


def test_root_keeps_every_mask(tmp_path):
    """access() as root allows reading anything: a root helper (whose handshake always names
    run_as, so own_uid is never set for it) would keep every mask all the same."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    from codespace_linux_sandbox.bwrap_argv import masked_deny_paths

    shut = tmp_path / "shut"
    shut.write_text("secret")
    shut.chmod(0o000)
    assert [path for path, _ in masked_deny_paths([str(shut)], own_uid=True)] == [str(shut)]


def test_an_unprivileged_servers_command_still_cannot_read_an_unmasked_secret(sandbox_env):
    """End to end, as an unprivileged server (skipped as root): the system secrets the server's uid
    cannot read get no mask, and the command cannot read them either."""
    if os.geteuid() == 0:
        pytest.skip("the server as an unprivileged user (run the suite under setpriv)")
    require_engine(sandbox_env.sandbox.preference)
    if sandbox_env.sandbox.preference != "bubblewrap":
        pytest.skip("masks are the bubblewrap engine's")
    if not os.path.exists("/etc/shadow") or os.access("/etc/shadow", os.R_OK):
        pytest.skip("/etc/shadow is missing or readable by this uid")
    code, out, err = sandbox_env.run(["/bin/sh", "-c", "cat /etc/shadow; echo rc=$?; grep -c ' /etc/shadow ' /proc/self/mountinfo"])
    assert "Permission denied" in err and "rc=1" in out, (out, err)
    assert out.strip().endswith("0"), out  # no mount over it

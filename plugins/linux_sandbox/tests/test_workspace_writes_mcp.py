"""Through real MCP sessions, server as root, both engines, a root-owned workspace and one owned
by uid 1000: a sandboxed command creates, writes, renames and removes files and directories
at the top of the workspace, what it leaves belongs to the workspace's owner on the host, and
the protected names there (an existing ``.git``, a missing ``.codespace``) stay out of its
reach. The Landlock engine used to refuse every new entry at the top (its ruleset split the
workspace around the protected names); as root it now protects them with read-only mounts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from codespace_linux_sandbox.limits import LANDLOCK_SPLIT, LANDLOCK_SPLIT_BY_DENY_READ

from codespace.testing import build_app, call_ok, connect

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as root (CI runs as root)")]
OWNERS = (0, 1000)

WORK = """
set -u
echo one > new.txt && echo more >> new.txt && mv new.txt kept.txt || echo FAIL file
echo gone > scratch && rm scratch || echo FAIL remove
mkdir d1 && echo x > d1/inner && mv d1 d2 && rm d2/inner && rmdir d2 || echo FAIL dir
mkdir keptdir && echo y > keptdir/f || echo FAIL keptdir
echo nope > .git/config 2>/dev/null && echo BREACH write-git
mv .git moved 2>/dev/null && echo BREACH rename-git
rm -rf .git 2>/dev/null; [ -f .git/HEAD ] || echo BREACH remove-git
mkdir .codespace 2>/dev/null && echo BREACH create-missing
touch .codespace/x 2>/dev/null && echo BREACH inside-missing
echo k > /proc/sys/kernel/core_pattern 2>/dev/null && echo BREACH sysctl
grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status || echo BREACH caps
echo done
"""


@pytest.fixture
def open_base():
    # Under /var/tmp with mode 0755: a uid-1000 command must reach its workspace.
    path = Path(tempfile.mkdtemp(prefix="codespace-writes-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _workspace(base: Path, owner: int) -> Path:
    ws = base / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / ".git" / "config").write_text("[core]\n")
    for path in [ws, *ws.rglob("*")]:
        os.lchown(path, owner, owner)
    return ws


@pytest.mark.parametrize("owner", OWNERS)
async def test_a_command_works_at_the_top_of_the_workspace(open_base, engine, owner):
    ws = _workspace(open_base, owner)
    app = build_app(ws, state_dir=open_base / "state", policy=f'[sandbox]\nengine = "{engine}"\n',
                    plugins=("linux_sandbox",))
    async with connect(app) as client:
        result = await call_ok(client, "exec", {"command": ["sh", "-c", WORK]})
        info = await call_ok(client, "workspace_info")
    out = result["output"]
    assert result["exit_code"] == 0, out
    assert "FAIL" not in out and "BREACH" not in out and out.rstrip().endswith("done"), out
    assert (ws / "kept.txt").read_text() == "one\nmore\n"
    assert (ws / "keptdir" / "f").read_text() == "y\n"
    assert not any((ws / name).exists() for name in ("new.txt", "scratch", "d1", "d2", "moved", ".codespace"))
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    for path in (ws / "kept.txt", ws / "keptdir", ws / "keptdir" / "f"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (owner, owner), (path, st.st_uid, st.st_gid)
    if engine == "landlock":
        limits = info["sandbox"]["cannot_enforce"]
        assert LANDLOCK_SPLIT not in limits and LANDLOCK_SPLIT_BY_DENY_READ in limits, limits

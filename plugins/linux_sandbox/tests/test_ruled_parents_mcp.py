"""Found by testing from outside: the policy hides and protects paths by their path, and under
the bubblewrap engine a command could rename the *parent* of a hidden or read-only path below
the top of the workspace (``mv a b``). The mask moved with the directory, and on the host the
files were then at ``b/secrets``, a path no rule names: the file tools and the next command
read and wrote them. Each directory between a writable root and such a path is now a mount
point inside the sandbox, which rename and rmdir refuse (the Landlock engine refused these
renames already). Through real MCP sessions, server as root, both engines."""

from __future__ import annotations

import pytest

from codespace.testing import build_app, call_error, call_ok, connect

pytestmark = pytest.mark.anyio

POLICY = """
[sandbox]
engine = "{engine}"
[filesystem]
paths = {{ "a/secrets" = "none", "c/d/e" = "none" }}
extra_protected = ["deploy/keys"]
"""

ATTEMPTS = """
set -u
for move in "a b" "a/secrets a/s2" "c c2" "c/d c/d2" "deploy d2" "deploy/keys deploy/k2"; do
    mv $move 2>/dev/null && echo "BREACH mv $move"
done
rmdir a c/d 2>/dev/null && echo BREACH rmdir
cat a/secrets/x.txt 2>/dev/null && echo BREACH read
{ echo new > deploy/keys/k; } 2>/dev/null && echo BREACH write
mkdir a/fresh || echo FAIL mkdir
mv a/fresh a/renamed || echo FAIL rename
echo kept > a/renamed/f || echo FAIL write
mv a/plain.txt a/plain2.txt || echo FAIL rename file
echo done
"""


@pytest.mark.parametrize("home_hidden", [False, True], ids=["plain", "workspace-in-hidden-home"])
async def test_a_command_cannot_rename_the_parents_of_what_the_policy_hides_or_protects(base, engine, home_hidden,
                                                                                        monkeypatch):
    """``workspace-in-hidden-home``, found by the next round of testing: with home = "hidden" and
    the workspace in the home, every pin counted as inside a mask, and none was bound."""
    ws = base / "ws"
    policy = POLICY.format(engine=engine)
    if home_hidden:
        monkeypatch.setenv("HOME", str(base))
        policy = policy.replace("[filesystem]\n", '[filesystem]\nhome = "hidden"\n')
    for directory in ("a/secrets", "c/d/e", "deploy/keys"):
        (ws / directory).mkdir(parents=True)
    (ws / "a/secrets/x.txt").write_text("HIDDEN\n")
    (ws / "c/d/e/y.txt").write_text("DEEP\n")
    (ws / "deploy/keys/k").write_text("KEY\n")
    (ws / "a/plain.txt").write_text("plain\n")
    app = build_app(ws, state_dir=base / "state", policy=policy, plugins=("linux_sandbox",))
    async with connect(app) as client:
        result = await call_ok(client, "exec", {"command": ["sh", "-c", ATTEMPTS]})
        # The rules still name where the files are: the file tools refuse them (and no other name
        # reaches them: the tree is as it was, checked below).
        hidden = await call_error(client, "read_file", {"path": "a/secrets/x.txt"})
        protected = await call_error(client, "write_file", {"path": "deploy/keys/k", "content": "PWN\n"})
    out = result["output"]
    assert "BREACH" not in out and out.rstrip().endswith("done"), out
    if engine == "bubblewrap":  # the directories stay writable (Landlock cannot write beside a hidden
        assert "FAIL" not in out, out  # path at all: workspace_info's cannot_enforce says so)
        assert (ws / "a/renamed/f").read_text() == "kept\n" and (ws / "a/plain2.txt").exists()
    assert "'none'" in hidden["message"], hidden
    assert "protected" in protected["message"], protected
    assert (ws / "a/secrets/x.txt").read_text() == "HIDDEN\n"
    assert (ws / "c/d/e/y.txt").read_text() == "DEEP\n"
    assert (ws / "deploy/keys/k").read_text() == "KEY\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a", "c", "deploy"]

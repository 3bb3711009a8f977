"""The patch helper (codespace-patch) runs inside the sandbox like any command: the policy
still governs it, and the sandbox adds the kernel's enforcement underneath."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("codespace_patch") is None or importlib.util.find_spec("codespace_fs") is None,
    reason="codespace-patch and codespace-fs are not installed in this environment",
)

PATCH = """*** Begin Patch
*** Add File: sub/hello.txt
+hello from inside the sandbox
*** Update File: sub/existing.txt
@@
-old
+new
*** End Patch
"""


def test_patch_helper_applies_inside_the_sandbox(sandbox_env):
    from codespace_patch.spawn import helper_command

    env = sandbox_env
    (env.ws / "sub" / "existing.txt").write_text("old\n")
    code, out, err = env.run([*helper_command(), PATCH], env={"CODESPACE_STATE_DIR": str(env.workspace.state_dir)})
    assert code == 0, out + err
    assert out.startswith("Success. Updated the following files:")
    assert (env.ws / "sub" / "hello.txt").read_text() == "hello from inside the sandbox\n"
    assert (env.ws / "sub" / "existing.txt").read_text() == "new\n"


def test_patch_helper_cannot_touch_protected_paths_inside_the_sandbox(sandbox_env):
    from codespace_patch.spawn import helper_command

    env = sandbox_env
    patch = "*** Begin Patch\n*** Update File: .git/config\n@@\n-[core]\n+[core]\n+\thooksPath = /tmp/evil\n*** End Patch\n"
    code, _out, _err = env.run([*helper_command(), patch], env={"CODESPACE_STATE_DIR": str(env.workspace.state_dir)})
    assert code != 0
    assert (env.ws / ".git" / "config").read_text() == "[core]\n"

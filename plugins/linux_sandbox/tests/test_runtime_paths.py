"""The server's own Python code stays runnable inside the sandbox when it lives under /tmp
(a venv or checkout there), while the rest of the host's /tmp stays hidden."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from codespace_linux_sandbox import backend

from conftest import make_env, require_engine


@pytest.fixture
def runtime_in_tmp():
    root = Path(tempfile.mkdtemp(prefix="codespace-runtime-", dir="/tmp"))
    code, other = root / "site", root / "not-runtime"
    code.mkdir()
    other.mkdir()
    (code / "runtime_marker.py").write_text("VALUE = 'runtime visible'\n")
    (other / "secret.txt").write_text("host tmp\n")
    sys.path.append(str(code))
    backend.runtime_paths.cache_clear()
    try:
        assert str(code) in backend.runtime_paths()
        yield code, other
    finally:
        sys.path.remove(str(code))
        backend.runtime_paths.cache_clear()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("start", ["wrap", "launch"])
def test_server_code_under_tmp_runs_inside_and_the_rest_of_tmp_stays_hidden(base, runtime_in_tmp, start):
    require_engine("bubblewrap")
    code, other = runtime_in_tmp
    env = make_env(base, "bubblewrap", start=start)
    script = (
        f"import sys, os; sys.path.insert(0, {str(code)!r}); import runtime_marker; print(runtime_marker.VALUE);"
        f"print(os.path.exists({str(other / 'secret.txt')!r}));"
        f"open({str(code / 'new.txt')!r}, 'w')"
    )
    status, out, err = env.run([backend.interpreter(), "-I", "-S", "-c", script])
    assert out.splitlines() == ["runtime visible", "False"], err
    assert status != 0 and "Read-only file system" in err  # bound back read-only
    assert not (code / "new.txt").exists()


@pytest.mark.anyio
async def test_a_root_the_policy_names_readable_under_tmp_is_readable_by_commands(base):
    """Found by testing from outside: "/tmp/x" = "read" was readable by the file tools and missing
    for commands under bubblewrap (the private /tmp hid it). It is bound back read-only; the rest
    of the host's /tmp stays hidden."""
    from codespace.testing import build_app, call_ok, connect

    require_engine("bubblewrap")
    root = Path(tempfile.mkdtemp(prefix="codespace-readable-", dir="/tmp"))
    try:
        (root / "shared").mkdir()
        (root / "shared" / "data.txt").write_text("shared data\n")
        (root / "other.txt").write_text("not named\n")
        ws = base / "ws"
        ws.mkdir()
        policy = f'[sandbox]\nengine = "bubblewrap"\n[filesystem.paths]\n"{root}/shared" = "read"\n'
        app = build_app(ws, state_dir=base / "state", policy=policy, plugins=("linux_sandbox",))
        script = (f"cat {root}/shared/data.txt; [ -e {root}/other.txt ] && echo VISIBLE other; "
                  f"{{ echo x > {root}/shared/new; }} 2>/dev/null && echo WRITABLE; echo done")
        async with connect(app) as client:
            result = await call_ok(client, "exec", {"command": ["sh", "-c", script]})
        assert result["output"] == "shared data\ndone\n", result["output"]
        assert not (root / "shared" / "new").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""The codespace command line, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from codespace.plugins import ENV_ALLOW
from codespace.testing import call_error, call_ok, connect

from .conftest import REPO, codespace_cmd, subprocess_env


def run(*args: str, cwd=None, allow: str = "example") -> subprocess.CompletedProcess:
    return subprocess.run([*codespace_cmd(), *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=subprocess_env(**{ENV_ALLOW: allow}))


def test_version_and_help():
    assert run("--version").stdout.startswith("codespace ")
    help_text = run("--help").stdout
    for command in ("serve", "plugins", "pins", "doctor", "ops"):
        assert command in help_text


def test_bad_policy_stops_serve_with_file_and_field(ws, state, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text('[network]\naccess = "sometimes"\n')
    result = run("serve", "--workspace", str(ws), "--state-dir", str(state), "--policy", str(policy))
    assert result.returncode == 2
    assert str(policy) in result.stderr and "field 'network.access'" in result.stderr
    assert result.stdout == ""


def test_missing_workspace(tmp_path):
    result = run("serve", "--workspace", str(tmp_path / "nope"))
    assert result.returncode == 2 and "not a directory" in result.stderr


@pytest.mark.anyio
async def test_ops_list_and_show(make_app, ws, state):
    async with connect(make_app()) as client:
        await call_ok(client, "tally", {"name": "cli", "operation_id": "cli-1"})
        await call_error(client, "read_file", {"path": "/proc/1/environ"})
    listing = run("ops", "list", "--workspace", str(ws), "--state-dir", str(state))
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert any("cli-1" in line and "tally" in line and "succeeded" in line for line in lines)
    assert any("read_file" in line and "refused" in line and "rule=filesystem.paths['/proc']" in line for line in lines)
    as_json = json.loads(run("ops", "list", "--json", "--status", "refused", "--workspace", str(ws),
                             "--state-dir", str(state)).stdout)
    assert [r["tool"] for r in as_json] == ["read_file"]
    shown = json.loads(run("ops", "show", "cli-1", "--workspace", str(ws), "--state-dir", str(state)).stdout)
    assert shown["status"] == "succeeded" and shown["result"]["count"] == 1
    missing = run("ops", "show", "nope", "--workspace", str(ws), "--state-dir", str(state))
    assert missing.returncode == 1 and "no operation" in missing.stderr


def test_statuses_agree_with_the_store():
    from typing import get_args

    from codespace.cli import STATUSES
    from codespace.store.base import Status

    assert STATUSES == get_args(Status)


def test_ops_list_rejects_an_unknown_status(ws, state):
    result = run("ops", "list", "--status", "bogus", "--workspace", str(ws), "--state-dir", str(state))
    assert result.returncode == 2
    assert "invalid choice: 'bogus'" in result.stderr and "succeeded" in result.stderr
    assert result.stdout == ""


@pytest.mark.anyio
async def test_ops_output_into_a_closed_pipe_ends_quietly(make_app, ws, state):
    """``codespace ops list | head -1``: the reader leaves early; no traceback."""
    async with connect(make_app()) as client:
        for i in range(300):
            await call_ok(client, "tally", {"name": "pipe", "operation_id": f"pipe-{i}"})
    for args in (["ops", "list", "--limit", "300"], ["ops", "list", "--json", "--limit", "300"],
                 ["ops", "show", "pipe-7"]):
        cmd = " ".join([*codespace_cmd(), *args, "--workspace", str(ws), "--state-dir", str(state)])
        done = subprocess.run(["bash", "-o", "pipefail", "-c", f"{cmd} | head -c 1"], capture_output=True,
                              text=True, timeout=60, env=subprocess_env())
        assert len(done.stdout) == 1, done
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
        assert done.returncode in (0, 141), done  # 141: the SIGPIPE status, as `ls | head` under pipefail


def test_run_py_help_exits_zero():
    from .conftest import REPO

    for flag in ("--help", "-h"):
        done = subprocess.run([sys.executable, str(REPO / "run.py"), flag], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done
        assert "run.py serve" in done.stdout
    bare = subprocess.run([sys.executable, str(REPO / "run.py")], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "run.py serve" in bare.stderr


def test_worker_subcommand_is_the_runtime_plugins_cli(ws):
    """`codespace worker ...` hands every argument to codespace-runtime's worker CLI."""
    from importlib.metadata import entry_points

    if not entry_points(group="console_scripts", name="codespace-worker"):
        pytest.skip("codespace-runtime is not installed")
    done = subprocess.run([*codespace_cmd(), "worker", "status", "--workspace", str(ws)], capture_output=True,
                          text=True, timeout=60, env=subprocess_env())
    assert done.returncode == 3, done.stderr  # not running
    assert "not running" in done.stdout + done.stderr


def _run_py():
    sys.path.insert(0, str(REPO))
    try:
        import run
    finally:
        sys.path.pop(0)
    return run


def test_run_py_workspace_options_are_passed_to_prepare():
    run = _run_py()
    assert run.workspace_options(["--transport", "http", "-w", "/x", "--policy=/p", "--port", "1",
                                  "--state-dir", "/s"]) == ["-w", "/x", "--policy=/p", "--state-dir", "/s"]


def test_run_py_holds_a_suites_lock_while_it_runs_it(tmp_path, monkeypatch):
    """CI runs the plugins' isolated suites beside run.py test; both lock a suite by name
    (.ci/run with flock(1)), so one suite never runs twice at once."""
    import fcntl

    run = _run_py()
    suite = REPO / "plugins" / "fs" / "tests"
    monkeypatch.delenv("CODESPACE_TEST_SUITE_LOCKS", raising=False)
    assert run.lock_suite(suite) is None
    monkeypatch.setenv("CODESPACE_TEST_SUITE_LOCKS", str(tmp_path))
    held = run.lock_suite(suite)
    other = os.open(tmp_path / "plugins-fs-tests", os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(held)
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
    assert [p.name for p in tmp_path.iterdir()] == ["plugins-fs-tests"]


def _editable(site, dist: str, mapping: dict, namespaces: dict | None = None) -> None:
    """What setuptools writes for an editable install: a .pth importing a finder module."""
    module = f"__editable___{dist}_1_0_finder"
    (site / f"__editable__.{dist}-1.0.pth").write_text(f"import {module}; {module}.install()")
    (site / f"{module}.py").write_text(
        "import sys\n"
        f"MAPPING: dict[str, str] = {mapping!r}\n"
        f"NAMESPACES: dict[str, list[str]] = {namespaces or {}!r}\n"
        "class _F:\n"
        "    @classmethod\n"
        "    def find_spec(cls, name, path=None, target=None):\n"
        "        import importlib.util, os\n"
        "        where = MAPPING.get(name)\n"
        "        return where and importlib.util.spec_from_file_location(\n"
        "            name, os.path.join(where, '__init__.py'), submodule_search_locations=[where])\n"
        "def install():\n"
        "    sys.meta_path.append(_F)\n")


def test_run_py_serves_plain_editable_installs_with_one_light_finder(tmp_path):
    # A real venv and real .pth processing: plain mappings are taken over, others left alone.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    src = tmp_path / "src"
    for package in ("alpha", "beta", "gamma_dir"):
        (src / package).mkdir(parents=True)
        (src / package / "__init__.py").write_text(f"NAME = {package!r}\n")
    _editable(site, "alpha", {"alpha": str(src / "alpha"), "beta": str(src / "beta")})
    _editable(site, "renamed", {"gamma": str(src / "gamma_dir")})  # a name that is not its directory's
    _editable(site, "spaces", {"delta": str(src / "delta")}, {"delta": [str(src / "delta")]})
    sys.path.insert(0, str(REPO))
    try:
        import run
    finally:
        sys.path.remove(str(REPO))
    run.light_editable_finders(venv)
    assert not (site / "__editable__.alpha-1.0.pth").exists()
    assert (site / "__editable__.renamed-1.0.pth").read_text().startswith("import ")
    assert (site / "__editable__.spaces-1.0.pth").read_text().startswith("import ")
    probe = ("import alpha, beta, gamma, sys; print(alpha.__file__, beta.__file__, gamma.NAME, "
             "'pathlib' in sys.modules, any(getattr(f, '__name__', '') == 'CheckoutFinder' for f in sys.meta_path))")
    shown = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                           timeout=60, env={"PATH": os.environ.get("PATH", "")})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [str(src / "alpha" / "__init__.py"), str(src / "beta" / "__init__.py"),
                                    "gamma_dir", "False", "True"]

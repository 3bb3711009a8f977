"""The helper executable: upstream's command-line contract, CodeSpace's checks,
start-up hardening and a lean start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_PLUGINS, patch_of, write

from codespace_patch.conformance.helper import helper_argv, helper_env, run_helper
from codespace_patch.conformance.trees import snapshot

USAGE = b"Usage: apply_patch 'PATCH'\n       echo 'PATCH' | apply_patch\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return helper_env(str(tmp_path / "state"), str(tmp_path), "test")


@pytest.fixture
def argv() -> list[str]:
    return helper_argv("test")


def test_argument_patch_summary_and_exit_code(ws, argv, env):
    write(ws, {"a.txt": "a\n", "gone.txt": "x\n"})
    out = run_helper(argv, str(ws), patch_of("*** Delete File: gone.txt", "*** Update File: a.txt", "-a", "+b",
                                             "*** Add File: ./n.txt", "+n"), env)
    assert (out.code, out.stderr) == (0, b"")
    assert out.stdout == b"Success. Updated the following files:\nA ./n.txt\nM a.txt\nD gone.txt\n"


def test_patch_on_stdin(ws, argv, env):
    out = run_helper(argv, str(ws), None, env, stdin=patch_of("*** Add File: s.txt", "+x").encode() + b"\n")
    assert out.code == 0 and (ws / "s.txt").read_text() == "x\n"


@pytest.mark.parametrize(
    ("args", "stdin", "code", "stderr"),
    [
        ([], b"", 2, USAGE),
        (["a", "b"], b"", 2, b"Error: apply_patch accepts exactly one argument.\n"),
        ([], b"\xff", 1, b"Error: Failed to read PATCH from stdin.\nstream did not contain valid UTF-8\n"),
        ([os.fsdecode(b"\xff")], b"", 1, b"Error: apply_patch requires a UTF-8 PATCH argument.\n"),
        ([], b"\n", 1, b"Invalid patch: The last line of the patch must be '*** End Patch'\n"),
        ([""], b"", 1, b"Invalid patch: The last line of the patch must be '*** End Patch'\n"),
        (["*** Begin Patch\n*** End Patch"], b"", 1, b"No files were modified.\n"),
    ],
)
def test_command_line_errors_match_upstream(ws, argv, env, args, stdin, code, stderr):
    done = subprocess.run([*argv, *args], cwd=ws, env=env, input=stdin, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (code, b"", stderr)


def test_error_output_is_upstreams_only(ws, argv, env):
    write(ws, {"f.py": "x = 1\n"})
    out = run_helper(argv, str(ws), patch_of("*** Update File: f.py", "-y = 2", "+y = 3"), env)
    assert (out.code, out.stdout) == (1, b"")
    assert out.stderr == f"Failed to find expected lines in {ws}/f.py:\ny = 2\n".encode()


def test_atomic_mode(ws, argv, env):
    write(ws, {"a.txt": "a\n"})
    before = snapshot(ws)
    patch = patch_of("*** Add File: created.txt", "+hello", "*** Update File: missing.txt", "-x", "+y")
    out = run_helper(argv, str(ws), patch, {**env, "CODESPACE_PATCH_MODE": "atomic"})
    assert out.code == 1 and out.stderr.startswith(b"Failed to read file to update")
    assert snapshot(ws) == before
    out = run_helper(argv, str(ws), patch, env)  # upstream mode keeps the first section (scenario 015)
    assert out.code == 1 and (ws / "created.txt").exists()
    out = run_helper(argv, str(ws), patch_of("*** Update File: a.txt", "-a", "+b"), {**env, "CODESPACE_PATCH_MODE": "atomic"})
    assert out.code == 0 and (ws / "a.txt").read_text() == "b\n"


@pytest.mark.parametrize("victim", ["outside", ".git/config", "secret/key"])
def test_a_forged_journal_where_the_agent_writes_touches_nothing(ws, argv, env, tmp_path, victim):
    """A journal is input: the state directory can no longer be one the agent writes (the core
    refuses one below the workspace or a writable path), but whoever else could write there must
    not gain a patch's reach through it. One naming a path the policy would not let a patch write
    (outside the workspace, protected, hidden) is moved aside untouched; it used to be rolled
    back: such files overwritten, created or deleted, a hidden one's content copied beside the
    journal. The patch itself still applies."""
    from codespace_patch.journal_format import JournalEntry, JournalRecord, encode, sha256_hex

    write(ws, {".codespace/policy.toml": 'version = 1\n[filesystem.paths]\n"secret" = "none"\n',
               ".git/config": "[core]\n", "secret/key": "private\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("original\n")
    target = outside / "victim.txt" if victim == "outside" else ws / victim
    before = target.read_bytes()
    record = JournalRecord(entries=[
        JournalEntry(str(target), b"PWNED\n", sha256_hex(before)),  # rolled back: the old bytes written
        JournalEntry(str(outside / "created.txt"), b"CREATED\n", None),
        JournalEntry(str(target), b"", "0" * 64, in_place=True),  # torn: its current bytes kept aside
    ], dirs=[str(outside / "no-such-dir")], pid=999999)  # a missing directory: the commit did not finish
    journals = tmp_path / "st" / "patch-journal"
    journals.mkdir(parents=True)
    (journals / "forged.journal").write_bytes(b"".join(encode(record)))
    out = run_helper(argv, str(ws), patch_of("*** Add File: harmless.txt", "+hi"),
                     {**env, "CODESPACE_STATE_DIR": str(tmp_path / "st"), "CODESPACE_PATCH_MODE": "atomic"})
    assert out.code == 0 and (ws / "harmless.txt").read_text() == "hi\n", out.stderr
    assert b"names a path no patch may write here" in out.stderr and b"moved aside, nothing touched" in out.stderr
    assert target.read_bytes() == before and not (outside / "created.txt").exists()
    assert sorted(p.name for p in journals.iterdir()) == ["forged.journal.refused"]


def test_links_and_fifos_in_a_journal_directory_the_agent_writes_are_never_followed(ws, argv, env, tmp_path):
    """A torn in-place entry's current bytes are kept beside its journal (.found-N): a link planted
    under that name took them wherever it led (the journal itself naming only a workspace file).
    FIFOs named like a journal or a slot hung the helper or ended it with a traceback."""
    from codespace_patch.journal_format import JournalEntry, JournalRecord, encode

    write(ws, {"a.txt": "attacker's bytes\n", ".git/config": "[core]\n"})
    victims = [tmp_path / "victim.txt", ws / ".git" / "config"]
    victims[0].write_text("original\n")
    journals = tmp_path / "st" / "patch-journal"
    journals.mkdir(parents=True)
    for n, victim in enumerate(victims):
        record = JournalRecord(entries=[JournalEntry(str(ws / "a.txt"), b"old\n", "0" * 64, in_place=True)],
                               dirs=[], pid=999999)
        (journals / f"j{n}.journal").write_bytes(b"".join(encode(record)))
        os.symlink(victim, journals / f"j{n}.journal.found-0")
    os.mkfifo(journals / "x.slot")
    os.mkfifo(journals / "y.journal")
    out = run_helper(argv, str(ws), patch_of("*** Add File: harmless.txt", "+hi"),
                     {**env, "CODESPACE_STATE_DIR": str(tmp_path / "st"), "CODESPACE_PATCH_MODE": "atomic"})
    assert out.code == 0 and (ws / "harmless.txt").read_text() == "hi\n", out.stderr
    assert [v.read_text() for v in victims] == ["original\n", "[core]\n"]
    assert b"Traceback" not in out.stderr and b"y.journal is not a regular file" in out.stderr, out.stderr


def test_setup_problems_exit_3_with_a_clear_message(ws, argv, env):
    out = run_helper(argv, str(ws), patch_of("*** Add File: a", "+x"), {**env, "CODESPACE_PLUGINS_ALLOW": "patch"})
    assert out.code == 3 and b"no file-system backend is installed" in out.stderr and b"codespace-fs" in out.stderr
    out = run_helper(argv, str(ws), patch_of("*** Add File: a", "+x"), {**env, "CODESPACE_PATCH_MODE": "partial"})
    assert out.code == 3 and b"CODESPACE_PATCH_MODE" in out.stderr
    out = run_helper(argv, str(ws), patch_of("*** Add File: a", "+x"), {**env, "CODESPACE_STATE_DIR": str(ws)})
    assert out.code == 3 and b"state directory" in out.stderr
    assert list(ws.iterdir()) == []


def test_console_script_is_installed(ws, env, tmp_path):
    script = Path(sys.executable).with_name("codespace-apply-patch")
    assert script.exists()
    env = {**env, "PYTHONPATH": str(TEST_PLUGINS)}
    done = subprocess.run([str(script), patch_of("*** Add File: a.txt", "+x")], cwd=ws, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (ws / "a.txt").read_text() == "x\n"


def test_hardening_failure_is_fatal_with_its_own_exit_code(ws):
    probe = (
        "import sys, codespace.contract.hardening as h\n"
        "def fail(): raise h.HardeningError('prctl(PR_SET_DUMPABLE, 0) failed: test', h.PRCTL_FAILED_EXIT_CODE)\n"
        "h.harden_process = fail\n"
        "from codespace_patch.cli import main\n"
        "sys.exit(main(['*** Begin Patch\\n*** Add File: a\\n+x\\n*** End Patch']))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ws, capture_output=True, text=True, timeout=60)
    assert done.returncode == 5 and "refusing to run" in done.stderr
    assert list(ws.iterdir()) == []


def test_startup_imports_stay_lean(ws, argv, env):
    lean = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run([*lean, patch_of("*** Add File: a.txt", "+x")], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "codespace_patch.cli" in modules
    for heavy in ("mcp", "codespace.server", "codespace.gateway", "codespace.tools.files", "anyio", "difflib",
                  "tomllib"):
        assert heavy not in modules, f"{heavy} is imported at helper start-up"


def test_a_refusal_loads_no_plugin_and_no_event_loop(ws, argv, env):
    # The core's gate decides before the helper looks for its file-system backend.
    lean = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run([*lean, patch_of("*** Add File: ../out.txt", "+x")], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "refused by policy:" in done.stderr
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "codespace.contract.gate" in modules
    for heavy in ("asyncio", "codespace.plugins", "pluggy", "codespace_patch_testfs"):
        assert heavy not in modules, f"{heavy} is imported before the refusal"


def test_a_directory_it_may_not_make_is_named_as_upstream_names_it():
    """Found by testing from outside (as uid 65534, against the pinned binary): an Add under a
    directory the user may not write said "Failed to write file"; upstream, which makes a
    missing directory only below an existing one, says "Failed to create parent directories
    for". Below a file there is nothing to make, and both say the write failed."""
    import shutil
    import tempfile

    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to run the helper as another uid")
    as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="patch-parents-"))  # outside tmp_path: the other uid must reach it
    try:
        root.chmod(0o777)
        tree, state = root / "tree", root / "state"
        tree.mkdir()
        state.mkdir()
        (tree / "rd").mkdir()
        (tree / "f.txt").write_text("a\n")
        if as_user:
            for path in (tree, state, tree / "rd", tree / "f.txt"):
                os.chown(path, 65534, 65534)
        (tree / "rd").chmod(0o555)
        env = helper_env(str(state), str(root))
        under_dir = run_helper(as_user + helper_argv(), str(tree), "*** Begin Patch\n*** Add File: rd/sub/g\n+x\n"
                               "*** End Patch", env)
        under_file = run_helper(as_user + helper_argv(), str(tree), "*** Begin Patch\n*** Add File: f.txt/s/g\n+x\n"
                                "*** End Patch", env)
    finally:
        (root / "tree" / "rd").chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)
    assert under_dir.stderr.decode().startswith(f"Failed to create parent directories for {tree}/rd/sub/g"), under_dir
    assert under_file.stderr.decode().startswith(f"Failed to write file {tree}/f.txt/s/g"), under_file


def test_an_atomic_commit_that_fails_says_what_upstream_says():
    """Found by testing from outside (as uid 65534): a write or a move that failed in atomic
    mode's commit was reported only as "atomic commit failed: ...", without upstream's message
    for that step; now it is upstream's, and nothing was changed."""
    import shutil
    import tempfile

    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to run the helper as another uid")
    as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="patch-commit-"))
    try:
        root.chmod(0o777)
        tree, state = root / "tree", root / "state"
        for directory in (tree, state, tree / "rd"):
            directory.mkdir()
        (tree / "ro.txt").write_text("a\n")
        (tree / "rd" / "m.txt").write_text("a\n")
        if as_user:
            for path in (tree, state, tree / "rd", tree / "ro.txt", tree / "rd" / "m.txt"):
                os.chown(path, 65534, 65534)
        (tree / "ro.txt").chmod(0o444)
        (tree / "rd").chmod(0o555)
        env = helper_env(str(state), str(root), mode="atomic")
        write = run_helper(as_user + helper_argv(), str(tree), "*** Begin Patch\n*** Update File: ro.txt\n@@\n-a\n+b\n"
                           "*** End Patch", env)
        move = run_helper(as_user + helper_argv(), str(tree), "*** Begin Patch\n*** Update File: rd/m.txt\n"
                          "*** Move to: moved.txt\n@@\n-a\n+b\n*** End Patch", env)
        after = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*"))
    finally:
        (root / "tree" / "rd").chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)
    assert write.stderr.decode().startswith(f"Failed to write file {tree}/ro.txt"), write
    assert move.stderr.decode().startswith(f"Failed to remove original {tree}/rd/m.txt"), move
    assert after == ["rd", "rd/m.txt", "ro.txt"]

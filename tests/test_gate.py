"""The core's gate for helpers without a server (``codespace.contract.gate``): the gateway's
decisions and messages, and the default policy a helper gets without validating it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codespace.contract import gate
from codespace.policy import Policy, load_policy
from codespace.policy.model import default_policy
from codespace.workspace import Workspace, WorkspaceError


def test_default_policy_is_policy_without_validation():
    assert default_policy() == Policy() == load_policy(None)
    assert default_policy().model_dump() == Policy().model_dump()
    assert default_policy().model_fields_set == Policy().model_fields_set == set()
    assert default_policy().filesystem.model_fields_set == set()
    with pytest.raises(Exception):
        load_policy(None).limits.max_sessions = 5  # type: ignore[misc]


def test_defaults_build_no_schema_and_need_no_toml_parser():
    code = (
        "import sys\nfrom codespace.policy.model import Policy, load_policy\n"
        "load_policy(None)\n"
        "print(type(Policy.__pydantic_validator__).__name__, 'tomllib' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["MockValSer", "False"], done.stderr


@pytest.fixture
def workspace(ws: Path, state: Path) -> Workspace:
    return Workspace.open(ws, state_dir=state)


def test_open_workspace_is_the_servers_workspace(ws, state, monkeypatch):
    monkeypatch.setenv("CODESPACE_STATE_DIR", str(state))
    opened = gate.open_workspace(ws)
    served = Workspace.open(ws, state_dir=state)
    assert (opened.root, opened.state_dir) == (served.root, served.state_dir)
    assert opened.policy.model_dump() == served.policy.model_dump()
    assert opened.paths.rules == served.paths.rules
    monkeypatch.setenv("CODESPACE_STATE_DIR", str(ws))
    assert gate.WorkspaceError is WorkspaceError
    with pytest.raises(gate.WorkspaceError, match="contains the workspace"):
        gate.open_workspace(ws)


def test_patch_size_refusal(workspace):
    limit = workspace.limits.max_argument_bytes
    assert gate.patch_size_refusal(workspace, limit) is None
    refusal = gate.patch_size_refusal(workspace, limit + 1)
    assert refusal.rule == "limits.max_argument_bytes"
    assert refusal.message == (
        f"refused by policy: the patch is {limit + 1} bytes and limits.max_argument_bytes is {limit}. "
        "To proceed: split it into smaller patches."
    )


def test_path_syntax_refusal_is_the_gateways():
    assert gate.path_syntax_refusal("/ws/a.txt") is None
    refusal = gate.path_syntax_refusal("/ws/a\0b")
    assert refusal.rule == "path syntax"
    assert refusal.message == (
        "refused: the path contains a NUL byte, which no file name can hold (rule: path syntax; "
        "path '/ws/a\\x00b'). To proceed: pass a valid path."
    )


def test_split_patch_targets():
    targets = [
        gate.Target("/w/a", "add"), gate.Target("/w/d", "delete"), gate.Target("/w/u", "update"),
        gate.Target("/w/from", "move", "move_source"), gate.Target("/w/to", "move", "move_destination"),
    ]
    assert gate.split_patch_targets(targets) == (["/w/d", "/w/from"], ["/w/a", "/w/u", "/w/to"])
    # A path the patch removes is judged as removed for every target at it (as the gateway's plan check does).
    again = [gate.Target("/w/p", "delete"), gate.Target("/w/p", "add"), gate.Target("/w/q", "add")]
    assert gate.split_patch_targets(again) == (["/w/p", "/w/p"], ["/w/q"])


def test_writes_are_judged_where_a_link_leads_and_removals_on_the_link(workspace, tmp_path):
    root = workspace.root
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside / "secret.txt", root / "link-out")
    link = str(root / "link-out")
    assert gate.patch_targets_refusal(workspace, [gate.Target(link, "delete")]) is None
    refusal = gate.patch_targets_refusal(workspace, [gate.Target(link, "update")])
    assert refusal == workspace.paths.check(link, "write", follow_leaf=True)
    assert refusal.message.startswith(f"refused by policy: {link} resolves through a symbolic link to")


def test_targets_are_judged_in_the_gateways_order(workspace):
    root = workspace.root
    late_write = gate.Target(f"{root}/.git/hooks/x", "add")
    late_remove = gate.Target("/etc/hostname", "delete")
    bad_syntax = gate.Target(f"{root}/{'n' * 300}", "add")
    # Path syntax first, then removals, then writes: not the order of the sections.
    assert gate.patch_targets_refusal(workspace, [late_write, late_remove, bad_syntax]).rule == "path syntax"
    first = gate.patch_targets_refusal(workspace, [late_write, late_remove])
    assert first == workspace.paths.check("/etc/hostname", "write")
    assert gate.patch_targets_refusal(workspace, [late_write]).rule == "filesystem.protected"
    assert gate.patch_targets_refusal(workspace, [gate.Target(f"{root}/fine.txt", "add")]) is None


def test_paths_refusal_reads_then_writes(workspace):
    rules = workspace.paths
    hidden = "/proc/self/environ"
    assert gate.paths_refusal(rules, read=["/etc/hostname"]) is None
    assert gate.paths_refusal(rules, read=[hidden], write=["/etc/hostname"]) == rules.check(hidden, "read")
    assert gate.paths_refusal(rules, write=["/etc/hostname"]) == rules.check("/etc/hostname", "write")


def test_plain_defaults_are_the_models_defaults():
    from codespace.policy.plain import PlainDefaults, _plain_values

    validated, plain = Policy(), PlainDefaults()
    for section, values in _plain_values().items():
        for name, value in values.items():
            assert getattr(getattr(validated, section), name) == value, f"{section}.{name}"
            assert getattr(getattr(plain, section), name) == value
    # Everything else comes from the model, methods included.
    assert plain.network == validated.network and plain.limits.exec_timeout_ms == validated.limits.exec_timeout_ms
    assert plain.model_dump() == validated.model_dump()
    assert plain.filesystem.merged_paths() == validated.filesystem.merged_paths()
    assert plain.filesystem.all_protected() == validated.filesystem.all_protected()
    with pytest.raises(AttributeError, match="read-only"):
        plain.limits.max_file_bytes = 1  # type: ignore[misc]


def test_a_workspace_on_plain_defaults_is_the_same_workspace(ws, state):
    plain = Workspace.open(ws, state_dir=state, plain_defaults=True)
    served = Workspace.open(ws, state_dir=state)
    assert plain.paths.rules == served.paths.rules and plain.state_dir == served.state_dir
    assert plain.limits.max_file_bytes == served.limits.max_file_bytes
    assert plain.commands.check_argv(["rm", "-rf", "/"]) == served.commands.check_argv(["rm", "-rf", "/"])
    assert isinstance(served.policy, Policy)


def test_a_policy_file_is_validated_even_with_plain_defaults(ws, state):
    (ws / ".codespace").mkdir()
    (ws / ".codespace" / "policy.toml").write_text("[limits]\nmax_file_bytes = 1024\n")
    opened = Workspace.open(ws, state_dir=state, plain_defaults=True)
    assert isinstance(opened.policy, Policy) and opened.limits.max_file_bytes == 1024
    (ws / ".codespace" / "policy.toml").write_text("[limits]\nmax_fil_bytes = 1024\n")
    with pytest.raises(WorkspaceError, match="unknown key"):
        Workspace.open(ws, state_dir=state, plain_defaults=True)


def test_the_gate_loads_no_pydantic_without_a_policy_file(tmp_path):
    code = (
        "import sys\nfrom codespace.contract import gate\n"
        f"w = gate.open_workspace({str(tmp_path)!r})\n"
        "t = [gate.Target(str(w.root / 'a'), 'add')]\n"
        "assert gate.patch_targets_refusal(w, t) is None and gate.patch_size_refusal(w, 10) is None\n"
        "print(sorted(m for m in ('pydantic', 'tomllib', 'codespace.policy.model') if m in sys.modules))\n"
    )
    env = {**os.environ, "CODESPACE_STATE_DIR": str(tmp_path.parent / "gate-state")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_default_state_directory_is_named_by_sha256_without_loading_hashlib(tmp_path: Path) -> None:
    # A helper not told its state directory derives it as the server does: the same digest of the
    # root (the server's directory, or the helper would hide and journal elsewhere), without OpenSSL.
    root = tmp_path / "wörk space"
    root.mkdir()
    code = (
        "import json, os, sys\nfrom codespace.contract import gate\n"
        "w = gate.open_workspace(sys.argv[1])\n"
        "print(json.dumps([w.state_dir_str, 'hashlib' in sys.modules, '_hashlib' in sys.modules]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CODESPACE_STATE_DIR", "XDG_STATE_HOME")}
    env["HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    import hashlib
    import json

    state_dir, hashlib_loaded, openssl_loaded = json.loads(done.stdout)
    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:12]
    assert state_dir.endswith(f"/workspaces/w_rk_space-{digest}") and state_dir.startswith(str(tmp_path / "home"))
    assert not hashlib_loaded and not openssl_loaded

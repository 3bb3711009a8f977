"""The policy model, path rules, command rules and environment building."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from codespace.policy import CommandRules, PathRules, Policy, PolicyError, build_env, load_policy, normalize, split_shell
from codespace.policy.env import refused_extra
from codespace.policy.model import CommandsPolicy, EnvPolicy, FilesystemPolicy
from codespace.workspace import Workspace, WorkspaceError


# -- loading ----------------------------------------------------------------


def test_defaults_when_absent():
    policy = load_policy(None)
    paths = policy.filesystem.merged_paths()
    assert paths["."] == "write" and paths["/"] == "read" and paths["/proc"] == "none"
    assert policy.network.access == "off" and policy.sandbox.mode == "auto"
    assert policy.env.inherit == "core"
    assert ".git" in policy.filesystem.all_protected()


def test_syntax_error_names_file(write_policy):
    path = write_policy("[limits\nmax_sessions = 3")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(path) in str(err.value) and "TOML syntax error" in str(err.value)


def test_unknown_key_names_field(write_policy):
    path = write_policy("[limits]\nmax_sesions = 3\n")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert "field 'limits.max_sesions'" in str(err.value) and "unknown key" in str(err.value)


def test_bad_values_name_field_and_problem(write_policy):
    path = write_policy('[filesystem.paths]\n"/x" = "rw"\n[limits]\nmax_file_bytes = 1073741824\n')
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    text = str(err.value)
    assert "2 problem(s)" in text
    assert "field 'filesystem.paths./x'" in text and "'read', 'write' or 'none'" in text
    assert "field 'limits.max_file_bytes'" in text and "536870912" in text


@pytest.mark.parametrize("value", ["-1", "10001", '"fast"', "1.5"])
def test_lane_spin_is_a_bounded_whole_number_of_microseconds(write_policy, value):
    with pytest.raises(PolicyError, match=r"field 'runtime\.lane_spin_us'"):
        load_policy(write_policy(f"[runtime]\nlane_spin_us = {value}\n"))
    assert load_policy(write_policy("[runtime]\nlane_spin_us = 0\n")).runtime.lane_spin_us == 0


def test_wildcard_domain_needs_explicit_opt_in(write_policy):
    with pytest.raises(PolicyError, match="allow_wildcard"):
        load_policy(write_policy('[network]\naccess = "allowlist"\nallowed_domains = ["*"]\n'))
    ok = load_policy(write_policy('[network]\naccess = "allowlist"\nallowed_domains = ["*"]\nallow_wildcard = true\n'))
    assert ok.network.allowed_domains == ["*"]


def test_unreadable_and_non_utf8_policy(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"x = '\xff'\n")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(bad)


# -- path rules -------------------------------------------------------------


def _rules(tmp_path: Path, paths: dict[str, str], protected: list[str] | None = None) -> PathRules:
    fs = FilesystemPolicy(paths=paths, **({"protected": protected} if protected is not None else {}))
    return PathRules.build(fs, tmp_path, "/home/u")


def test_normalize_is_lexical():
    assert normalize("a/../b/./c", "/ws") == "/ws/b/c"
    assert normalize("../../../../etc", "/ws") == "/etc"
    assert normalize("/x//y/", "/ws") == "/x/y"
    assert normalize(".", "/ws") == "/ws"


def test_most_specific_entry_wins(tmp_path):
    rules = _rules(tmp_path, {"src": "read", "src/gen": "write", "src/gen/keys": "none"})
    ws = str(tmp_path)
    assert rules.access(f"{ws}/a") == "write"
    assert rules.access(f"{ws}/src/a") == "read"
    assert rules.access(f"{ws}/src/gen/a") == "write"
    assert rules.access(f"{ws}/src/gen/keys/k") == "none"
    assert rules.access("/usr/bin/ls") == "read"


def test_prefix_confusion_is_not_a_match(tmp_path):
    rules = _rules(tmp_path, {"/data": "write"})
    assert rules.access("/data/x") == "write"
    assert rules.access("/data-evil/x") == "read"
    assert rules.access(f"{tmp_path}-evil/x") == "read"


def test_ties_go_to_the_more_restrictive(tmp_path):
    rules = _rules(tmp_path, {"lib": "write", str(tmp_path / "lib"): "read"})
    assert rules.access(str(tmp_path / "lib" / "x")) == "read"
    rules = _rules(tmp_path, {"lib": "none", str(tmp_path / "lib"): "read"})
    assert rules.access(str(tmp_path / "lib" / "x")) == "none"


def test_home_entries_expand(tmp_path):
    rules = _rules(tmp_path, {"~/.cache": "write"})
    assert rules.access("/home/u/.ssh/id_rsa") == "none"
    assert rules.access("/home/u/.cache/x") == "write"


def test_protected_names_and_anchored_paths(tmp_path):
    rules = _rules(tmp_path, {}, protected=[".git", "/.bashrc", "deploy/keys"])
    ws = str(tmp_path)
    for path in (f"{ws}/.git/config", f"{ws}/a/b/.git/HEAD", f"{ws}/.bashrc", f"{ws}/deploy/keys/k"):
        refusal = rules.check(path, "write")
        assert refusal is not None and refusal.rule == "filesystem.protected", path
        assert rules.check(path, "read") is None
    for path in (f"{ws}/sub/.bashrc", f"{ws}/.gitignore", f"{ws}/git/x", f"{ws}/sub/deploy/keys/k"):
        assert rules.check(path, "write") is None, path


def test_check_follows_existing_links(tmp_path):
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    os.symlink("/etc", ws / "etc")
    os.symlink("real", ws / "inside")
    os.symlink(".git", ws / "gitlink")
    rules = PathRules.build(FilesystemPolicy(), ws, "/home/u")
    refusal = rules.check(str(ws / "etc" / "passwd"), "write")
    assert refusal is not None and "resolves through a symbolic link to /etc/passwd" in refusal.message
    assert rules.check(str(ws / "inside" / "x"), "write") is None
    refusal = rules.check(str(ws / "gitlink" / "config"), "write")
    assert refusal is not None and refusal.rule == "filesystem.protected"


def test_a_link_whose_way_passes_through_a_hidden_directory_is_refused_whether_or_not_it_arrives(tmp_path):
    """Found by testing from outside: only where a link led was checked, not what its way passed.
    ``a/secrets/realdir/../../../pub.txt`` reached pub.txt and ``a/secrets/nodir/...`` failed, so
    the answer said which names exist in the hidden a/secrets. Both are refused alike now, naming
    the rule, and a way through a directory above an open area (the workspace's own parents) stays."""
    ws = tmp_path / "ws"
    (ws / "a" / "secrets" / "realdir").mkdir(parents=True)
    (ws / "a" / "secrets" / "open" / "x").mkdir(parents=True)
    (ws / "pub.txt").write_text("pub")
    os.symlink("a/secrets/realdir/../../../pub.txt", ws / "py")
    os.symlink("a/secrets/nodir/../../../pub.txt", ws / "pn")
    os.symlink("a/secrets/open/x/../../../../pub.txt", ws / "through_open")  # a/secrets/open is readable
    os.symlink(str(tmp_path / "ws" / "pub.txt"), ws / "absolute")
    os.symlink("py", ws / "chain")
    rules = _rules(ws, {"a/secrets": "none", "a/secrets/open": "read", "/": "none", str(ws): "write"})
    for name in ("py", "pn", "chain"):
        for need in ("read", "write"):
            refusal = rules.check(str(ws / name), need, follow_leaf=True)
            assert refusal is not None and refusal.rule == "filesystem.paths['a/secrets']", (name, refusal)
            assert f"into {ws}/a/secrets (filesystem.paths['a/secrets'] = 'none'), which the policy hides" \
                in refusal.message, refusal.message
            assert "realdir" not in refusal.message and "nodir" not in refusal.message
    # the way to an open area below a hidden one passes; so does the way to the workspace from /,
    # which the policy hides here but for the workspace below it
    assert rules.check(str(ws / "through_open"), "read") is None
    assert rules.check(str(ws / "absolute"), "read") is None


def test_a_link_looping_back_through_a_hidden_directory_is_judged_whatever_it_holds(tmp_path):
    """Found by the third round of testing from outside: the kernel cannot resolve a loop, Python's
    realpath then followed it by name through the hidden directory and came back with the path
    itself, so the gateway judged nothing, and what grep and apply_patch met next (ENOENT, ELOOP,
    ENOTDIR) told what the directory held. Every such link is refused alike now."""
    ws = tmp_path / "ws"
    (ws / "pub").mkdir(parents=True)
    (ws / "secret" / "real").mkdir(parents=True)
    (ws / "secret" / "file").write_text("x")
    os.symlink("../pub", ws / "secret" / "lnk")
    rules = _rules(ws, {"secret": "none"})
    answers = set()
    for n, name in enumerate(("lnk", "nodir", "real", "file")):
        os.symlink(f"../secret/{name}/../../pub/loop{n}", ws / "pub" / f"loop{n}")
        for need in ("read", "write"):
            refusal = rules.check(str(ws / "pub" / f"loop{n}"), need, follow_leaf=True)
            assert refusal is not None, (name, need)
            answers.add((need, refusal.rule, refusal.message.replace(f"loop{n}", "loop")))
    assert len(answers) == 2, answers  # one per need, whatever the hidden directory holds
    assert all(f"into {ws}/secret (filesystem.paths['secret'] = 'none')" in message for _, _, message in answers)


def test_a_way_past_the_kernels_bounds_is_refused_at_once_naming_them(tmp_path):
    """Found by testing from outside: 40 links each of 4,000 bytes of "d/../" took one call seconds
    to judge. Past 40 links or 4,096 steps the kernel would refuse the path (ELOOP) anyway: it is
    refused here, without looking further (where a hidden directory could lie)."""
    import time

    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    for i in range(41):
        os.symlink(f"c{i + 1}", ws / f"c{i}")
    os.symlink("d", ws / "c41")
    for i in range(40):
        os.symlink("d/../" * 790 + f"w{i + 1}", ws / f"w{i}")
    os.symlink("d", ws / "w40")
    rules = _rules(ws, {})
    started = time.monotonic()
    chain = rules.check(str(ws / "c0" / "f"), "read")
    wide = rules.check(str(ws / "w0" / "f"), "read")
    assert time.monotonic() - started < 1
    assert chain is not None and chain.rule == "filesystem.symlinks" and "more than 40 symbolic links" in chain.message
    assert wide is not None and "more than 4096 steps" in wide.message and "ELOOP" in wide.message, wide
    assert rules.check(str(ws / "c40" / "f"), "read") is None  # two links: well within


def test_a_link_into_a_hidden_path_is_refused_without_naming_where_it_leads(tmp_path):
    """A link inside a hidden area leads further (its text is that area's content): the refusal
    names the rule that hides it, never the resolved path."""
    ws, hidden = tmp_path / "ws", tmp_path / "hidden"
    (ws).mkdir()
    (hidden / "very" / "secret").mkdir(parents=True)
    os.symlink(hidden / "very" / "secret" / "id_ed25519", hidden / "current_key")
    os.symlink(hidden, ws / "door")
    policy = FilesystemPolicy.model_validate({"paths": {str(hidden): "none"}})
    rules = PathRules.build(policy, ws, "/home/u")
    for need in ("read", "write"):
        refusal = rules.check(str(ws / "door" / "current_key"), need)
        assert refusal is not None and refusal.rule.startswith("filesystem.paths"), refusal
        assert "very" not in refusal.message and "id_ed25519" not in refusal.message, refusal.message
        assert f"into {hidden} (" in refusal.message and "which the policy hides" in refusal.message


def test_workspace_hides_state_and_protects_policy(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text("")
    workspace = Workspace.open(ws, policy_path=policy, state_dir=tmp_path / "state")
    assert workspace.paths.access(str(tmp_path / "state" / "operations.sqlite3")) == "none"
    assert workspace.paths.access(str(policy)) == "read"


def test_policy_inside_workspace_is_found_and_protected(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".codespace").mkdir(parents=True)
    (ws / ".codespace" / "policy.toml").write_text("[limits]\nmax_sessions = 5\n")
    workspace = Workspace.open(ws, state_dir=tmp_path / "state")
    assert workspace.policy.limits.max_sessions == 5
    assert workspace.paths.check(str(ws / ".codespace" / "policy.toml"), "write") is not None


def test_state_dir_may_not_contain_the_workspace(tmp_path):
    (tmp_path / "ws").mkdir()
    with pytest.raises(WorkspaceError, match="contains the workspace"):
        Workspace.open(tmp_path / "ws", state_dir=tmp_path)


@pytest.mark.parametrize("where", ["workspace", "writable path"])
def test_state_and_worker_dirs_may_not_be_below_what_the_agent_can_write(tmp_path, write_policy, where):
    """Found by testing: with the state directory inside the workspace, a sandboxed `mv` of its
    parent moved it out from under its `none` rule, and write_file then rewrote the store (whose
    records a root server acts on at restart)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    writable = ws if where == "workspace" else tmp_path / "scratch"
    policy = write_policy(f'[filesystem.paths]\n"{tmp_path / "scratch"}" = "write"\n')
    with pytest.raises(WorkspaceError, match=f"state directory {writable}/a/state is inside {writable}, "
                                             "which the agent can .*--state-dir"):
        Workspace.open(ws, policy_path=policy, state_dir=writable / "a" / "state")
    daemon = write_policy(f'[filesystem.paths]\n"{tmp_path / "scratch"}" = "write"\n'
                          f'[runtime]\ndaemon_dir = "{writable / "d"}"\n')
    with pytest.raises(WorkspaceError, match=f"worker directory {writable}/d is inside {writable}.*runtime.daemon_dir"):
        Workspace.open(ws, policy_path=daemon, state_dir=tmp_path / "state")
    assert Workspace.open(ws, policy_path=policy, state_dir=tmp_path / "state").state_dir == tmp_path / "state"


def test_a_recorded_group_without_a_start_time_is_not_reaped(tmp_path):
    """Found by testing: a store record naming only a pgid made a restarting root server
    SIGKILL whatever process had that number."""
    from codespace.reaper import group_is_ours
    from codespace.store import proc_start_ticks

    victim = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert not group_is_ours(victim.pid, None)
        assert group_is_ours(victim.pid, proc_start_ticks(victim.pid))
        assert not group_is_ours(victim.pid, proc_start_ticks(victim.pid) + 1)
    finally:
        victim.kill()
        victim.wait()


def test_gitdir_file_target_is_protected(write_policy, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "repo.git").mkdir()
    (ws / ".git").write_text(f"gitdir: {tmp_path / 'repo.git'}\n")
    workspace = Workspace.open(ws, policy_path=write_policy(f'[filesystem.paths]\n"{tmp_path}" = "write"\n'),
                               state_dir=tmp_path.parent / f"{tmp_path.name}-state")
    refusal = workspace.paths.check(str(tmp_path / "repo.git" / "hooks" / "pre-commit"), "write")
    assert refusal is not None and "gitdir" in refusal.rule


# -- command rules --------------------------------------------------------------


def test_split_shell_finds_simple_commands():
    commands, opaque = split_shell("FOO=1 git status && ls -la | wc -l; echo 'a && b' > out 2>&1\nmake test")
    assert commands == [["FOO=1", "git", "status"], ["ls", "-la"], ["wc", "-l"], ["echo", "a && b"], ["make", "test"]]
    assert not opaque
    assert split_shell("echo $(rm -rf x)")[1]
    assert split_shell("cat <<EOF\nrm x\nEOF")[1]
    assert split_shell("echo 'unterminated") == ([], True)


def _cmd(**kwargs) -> CommandRules:
    return CommandRules(CommandsPolicy(**kwargs))


def test_argv_rules_match_program_and_argument_prefix():
    rules = _cmd(rules=[{"program": "git", "args": ["push", "**"], "decision": "deny"},
                        {"program": "/usr/bin/*", "args": ["--danger"], "decision": "deny"}])
    assert rules.check_argv(["git", "push", "origin"]).rule == "commands.rules[0]"
    assert rules.check_argv(["/usr/local/bin/git", "push"]).rule == "commands.rules[0]"
    assert rules.check_argv(["git", "pull"]) is None
    assert rules.check_argv(["git"]) is None
    assert rules.check_argv(["/usr/bin/tool", "--danger"]).rule == "commands.rules[1]"
    assert rules.check_argv(["/usr/bin/tool", "--danger", "more"]) is None
    assert rules.check_argv(["tool", "--danger"]) is None


@pytest.mark.parametrize("argv", [
    ["env", "-i", "A=1", "rm", "x"], ["nice", "-n", "5", "rm", "x"], ["timeout", "-s", "KILL", "5", "rm", "x"],
    ["sudo", "-u", "root", "rm", "x"], ["bash", "-c", "echo ok && rm x"], ["sh", "-ec", "rm x"],
    ["xargs", "-n", "1", "rm"], ["nohup", "rm", "x"], ["/bin/bash", "-lc", "timeout 3 env rm x"],
])
def test_wrappers_are_looked_through(argv):
    rules = _cmd(rules=[{"program": "rm", "decision": "deny"}])
    refusal = rules.check_argv(argv)
    assert refusal is not None and refusal.rule == "commands.rules[0]", argv


def test_default_deny_requires_an_allow_rule_for_every_command():
    rules = _cmd(default="deny", rules=[{"program": "ls", "decision": "allow"}])
    assert rules.check_argv(["ls"]) is None
    assert rules.check_shell("ls | grep x").rule == "commands.default"
    assert rules.check_argv(["env", "ls"]).rule == "commands.default"


def test_deny_wins_over_allow():
    rules = _cmd(rules=[{"program": "git", "decision": "allow"}, {"program": "git", "args": ["push"], "decision": "deny"}])
    assert rules.check_argv(["git", "push"]).rule == "commands.rules[1]"


def test_opaque_shell_policy():
    assert _cmd().check_shell("echo `id`") is None
    refusal = _cmd(opaque_shell="deny").check_shell("echo `id`")
    assert refusal.rule == "commands.opaque_shell" and "cannot be checked statically" in refusal.message
    assert _cmd(opaque_shell="deny").check_argv(["bash", "-c", "eval $X"]).rule == "commands.opaque_shell"


# -- environment --------------------------------------------------------------------


SERVER_ENV = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "t",
              "API_KEY": "k", "EDITOR": "vi", "LANG": "C.UTF-8"}


def test_env_core_drops_everything_else():
    env = build_env(EnvPolicy(), SERVER_ENV)
    assert env == {"PATH": "/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def test_env_all_drops_secret_looking_names():
    env = build_env(EnvPolicy(inherit="all"), SERVER_ENV)
    assert "EDITOR" in env and not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "API_KEY"} & set(env)
    kept = build_env(EnvPolicy(inherit="all", ignore_default_excludes=True), SERVER_ENV)
    assert kept["GITHUB_TOKEN"] == "t"


def test_env_exclude_set_include_only_and_extra():
    policy = EnvPolicy(inherit="all", exclude=["EDI*"], set={"CI": "1", "MY_TOKEN": "allowed"}, include_only=["PATH", "CI", "MY_*"])
    env = build_env(policy, SERVER_ENV, {"MY_VAR": "x", "OTHER_SECRET": "no", "MY_TOKEN": "override"})
    assert env == {"PATH": "/bin", "CI": "1", "MY_TOKEN": "override", "MY_VAR": "x"}
    assert refused_extra(policy, {"OTHER_SECRET": "no", "MY_VAR": "x"}) == ["OTHER_SECRET"]
    assert build_env(EnvPolicy(inherit="none"), SERVER_ENV) == {}


def test_policy_model_is_frozen():
    policy = Policy()
    with pytest.raises(Exception):
        policy.limits.max_sessions = 5  # type: ignore[misc]

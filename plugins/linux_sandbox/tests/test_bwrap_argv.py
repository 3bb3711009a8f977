"""bubblewrap's argv: upstream's flags and mount order, masks, fail-closed links (no bwrap run)."""

from __future__ import annotations

import pytest
from codespace_linux_sandbox import bwrap_argv


def _hs(tmp_path, **policy):
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    base = {"readable": ["/"], "writable": [str(ws)], "deny_read": ["/proc", "/dev", "/sys"],
            "protected": [str(ws / ".git"), str(ws / ".codex")], "network": "off"}
    base.update(policy)
    return {"policy": base, "command": {"argv": ["true"], "cwd": str(ws), "env": {"A": "1", "TMPDIR": "/tmp"}},
            "options": {"mount_proc": True}}


def _pairs(args, flag):
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_flags_and_order(tmp_path):
    (tmp_path / "ws" / ".git").mkdir(parents=True)
    plan = bwrap_argv.build(_hs(tmp_path))
    args = plan.args
    ws = str(tmp_path / "ws")
    assert args[:7] == ["--new-session", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev"]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net"):
        assert flag in args
    assert args[args.index("--proc") + 1] == "/proc" and args[args.index("--cap-drop") + 1] == "ALL"
    order = [args.index("--tmpfs"), args.index("--bind"), args.index(f"{ws}/.git"), args.index(f"{ws}/.codex")]
    assert order == sorted(order)  # /tmp, then the writable root, then protected paths
    assert _pairs(args, "--ro-bind")[-1] == f"{ws}/.git"
    assert plan.placeholders == [f"{ws}/.codex"]  # missing: masked, with a host placeholder
    assert "/sys" in _pairs(args, "--tmpfs")  # deny-read mask; /proc and /dev are replaced, not masked
    assert "/proc" not in _pairs(args, "--tmpfs") and "/dev" not in _pairs(args, "--tmpfs")
    assert args[args.index("--setenv") + 1:args.index("--setenv") + 3] == ["A", "1"]
    assert args[args.index("--chdir") + 1] == ws


def test_network_on_keeps_the_namespace(tmp_path):
    assert "--unshare-net" not in bwrap_argv.build(_hs(tmp_path, network="on")).args


def test_proc_preflight_result_is_used(tmp_path):
    hs = _hs(tmp_path)
    hs["options"]["mount_proc"] = False
    assert "--proc" not in bwrap_argv.build(hs).args


def test_deeper_policy_entries_win(tmp_path):
    """A writable root inside a deny-read path is mounted after the mask, like the most
    specific policy entry wins for the gateway."""
    secret = tmp_path / "secret"
    (secret / "ws").mkdir(parents=True)
    hs = _hs(tmp_path, writable=[str(secret / "ws")], deny_read=[str(secret)], protected=[])
    args = bwrap_argv.build(hs).args
    assert args.index(str(secret)) < args.index(str(secret / "ws"))


def test_deny_read_file_and_missing(tmp_path):
    (tmp_path / "token").write_text("x")
    args = bwrap_argv.build(_hs(tmp_path, deny_read=[str(tmp_path / "token"), str(tmp_path / "missing")])).args
    assert args[args.index(str(tmp_path / "token")) - 1] == "/dev/null"
    assert str(tmp_path / "missing") not in args


def test_the_parents_of_ruled_paths_are_pinned_as_mount_points(tmp_path):
    """Each directory between the writable root and a deeper deny-read or protected path is bound
    onto itself (rename and rmdir then fail with EBUSY), before the path's own mask; none is bound
    inside a mask or a read-only path, nor above a path directly in the root, nor past a missing one."""
    ws = tmp_path / "ws"
    for directory in ("a/b/secrets", "a/b/keys/inner/deeper", "hidden/sub", "p/q"):
        (ws / directory).mkdir(parents=True)
    hs = _hs(tmp_path, deny_read=[str(ws / "a/b/secrets"), str(ws / "hidden"), str(ws / "hidden/sub/x"),
                                  str(ws / "gone/away/x")],
             protected=[str(ws / ".git"), str(ws / "a/b/keys"), str(ws / "a/b/keys/inner/deeper"), str(ws / "p/q/r")])
    args = bwrap_argv.build(hs).args
    binds = _pairs(args, "--bind")
    assert binds == [str(ws), str(ws / "a"), str(ws / "p"), str(ws / "a/b"), str(ws / "p/q")], binds
    assert args[args.index(str(ws / "a/b")) + 1] == str(ws / "a/b")  # --bind a/b a/b
    assert args.index(str(ws / "a/b")) < args.index(str(ws / "a/b/secrets"))  # before the mask on top


def test_parents_are_pinned_when_the_writable_root_lies_inside_a_hidden_or_read_only_area(tmp_path):
    """Found by testing from outside: with home = "hidden" and the workspace in the home (or a
    writable root below a read-only or hidden entry), every pin counted as inside a mask and none
    was bound, so ``mv a b`` carried a/secrets out of its rule again."""
    home = tmp_path / "home"
    ws = home / "ws"
    for directory in ("a/secrets", "deploy/keys"):
        (ws / directory).mkdir(parents=True)
    hs = _hs(tmp_path, writable=[str(ws)], deny_read=[str(home), str(ws / "a/secrets")],
             protected=[str(ws / "deploy/keys")], readable=["/"])
    binds = _pairs(bwrap_argv.build(hs).args, "--bind")
    assert str(ws / "a") in binds and str(ws / "deploy") in binds, binds


@pytest.mark.parametrize("kind", ["protected", "deny_read"])
def test_a_link_inside_a_writable_root_fails_closed(tmp_path, kind):
    ws = tmp_path / "ws"
    (ws / "real").mkdir(parents=True)
    (ws / "link").symlink_to(ws / "real")
    hs = _hs(tmp_path, **{kind: [str(ws / "link" / "x")]})
    with pytest.raises(bwrap_argv.SetupError, match="crosses the symbolic link"):
        bwrap_argv.build(hs)


def test_private_tmp_skips_writable_tmp(tmp_path):
    assert bwrap_argv.private_tmp_dirs({"writable": ["/tmp"]}, {}) == []
    assert bwrap_argv.private_tmp_dirs({"writable": []}, {"TMPDIR": str(tmp_path)}) == ["/tmp", str(tmp_path)]


def test_runtime_under_private_tmp_is_bound_back_read_only(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    hs = _hs(tmp_path)
    hs["command"]["env"]["TMPDIR"] = str(tmp_path)
    hs["options"]["runtime"] = [str(venv), "/usr"]
    args = bwrap_argv.build(hs).args
    binds = [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == "--ro-bind"]
    assert (str(venv), str(venv)) in binds
    assert ("/usr", "/usr") not in binds  # not hidden: nothing to bind back
    assert args.index(str(tmp_path)) < args.index(str(venv))  # after the tmpfs that hid it


def test_roots_the_policy_names_readable_under_private_tmp_are_bound_back_read_only(tmp_path):
    """Found by testing from outside: "/tmp/x" = "read" was readable by the file tools and missing
    for commands (the private /tmp hid it)."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "token.txt").write_text("t")
    hs = _hs(tmp_path, readable=["/", str(tmp_path / "shared"), str(tmp_path / "token.txt"), str(tmp_path / "gone")])
    args = bwrap_argv.build(hs).args
    binds = [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == "--ro-bind"]
    for path in (tmp_path / "shared", tmp_path / "token.txt"):
        assert (str(path), str(path)) in binds
        assert args.index("/tmp") < args.index(str(path))  # on top of the private tmpfs
    assert str(tmp_path / "gone") not in args  # missing: nothing to bind


def test_runtime_stays_hidden_where_the_policy_hides_it(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    hs = _hs(tmp_path, deny_read=["/proc", str(tmp_path)])
    hs["command"]["env"]["TMPDIR"] = str(tmp_path)
    hs["options"]["runtime"] = [str(venv)]
    assert str(venv) not in _pairs(bwrap_argv.build(hs).args, "--ro-bind")
    hs = _hs(tmp_path, readable=[str(tmp_path / "ws")])
    hs["command"]["env"]["TMPDIR"] = str(tmp_path)
    hs["options"]["runtime"] = [str(venv)]
    assert str(venv) not in _pairs(bwrap_argv.build(hs).args, "--ro-bind")

"""The Landlock plan: roots split around exceptions, since Landlock can only grant."""

from __future__ import annotations

from codespace_linux_sandbox import landlock


def test_split_around_deny_and_protected(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "src").mkdir()
    (ws / "README").write_text("x")
    secret = tmp_path / "secret"
    secret.mkdir()
    (tmp_path / "other").mkdir()
    policy = {"readable": [str(tmp_path)], "writable": [str(ws)], "deny_read": [str(secret), "/proc"],
              "protected": [str(ws / ".git"), str(ws / ".codex")]}
    rules = dict(landlock.plan(policy, []))
    assert rules[str(tmp_path)] == "list"  # holds a deny-read child: names only
    assert rules[str(tmp_path / "other")] == "r" and str(secret) not in rules
    assert rules[str(ws)] == "r"  # the writable root is split around .git and .codex
    assert rules[str(ws / "src")] == "w" and rules[str(ws / "README")] == "w"
    assert rules[str(ws / ".git")] == "r" and str(ws / ".codex") not in rules
    assert rules["/proc"] == "r" and rules["/dev/null"] == "dev_rw"


def test_rights_per_abi():
    assert landlock.handled_fs(1) == (1 << 13) - 1
    assert landlock.handled_fs(3) & landlock.TRUNCATE and not landlock.handled_fs(2) & landlock.TRUNCATE
    assert landlock.handled_fs(5) & landlock.IOCTL_DEV
    assert not landlock.rights("w", 7) & (landlock.MAKE_CHAR | landlock.MAKE_BLOCK)
    assert landlock.rights("r", 7) == landlock.READ


def test_abi_probe_agrees_with_the_core():
    from codespace import kernel

    probe = kernel.landlock_abi()
    if probe.ok:
        assert landlock.abi() == probe.value

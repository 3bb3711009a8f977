"""Policy to sandbox: the decision, the layout, and denial feedback."""

from __future__ import annotations

import pytest

from codespace.backends import Backends
from codespace.contract import Refused, SandboxInfo
from codespace.plugins import ENV_ALLOW, Plugins
from codespace.sandboxing import decide, denial_hint, layout_for


def test_layout_follows_the_path_rules(make_workspace, tmp_path):
    ws = make_workspace('[filesystem.paths]\n"vendor" = "read"\n"/opt/cache" = "write"\n"secret" = "none"\n')
    layout = layout_for(ws)
    root = str(ws.root)
    assert layout.writable == ["/opt/cache", root]  # shallowest first
    assert "/" in layout.readable and root in layout.readable
    assert f"{root}/secret" in layout.deny_read and str(tmp_path / "state") in layout.deny_read
    assert f"{root}/vendor" in layout.protected  # read-only inside a writable root
    assert f"{root}/.git" in layout.protected and f"{root}/.bashrc" in layout.protected
    assert ".git" in layout.protected_names
    assert layout.network == "off"
    assert layout_for(make_workspace('[network]\naccess = "allowlist"\nallowed_domains = ["pypi.org"]\n')).network == "proxy"


class _FakeBackends(Backends):
    def __init__(self, sandbox):
        super().__init__(Plugins.load(env={ENV_ALLOW: "(none)"}), None)
        self._cache["sandbox"] = (sandbox, "test")


class _Unavailable:
    def info(self):
        return SandboxInfo(engine="bubblewrap", available=False, detail="bwrap not found")


def test_decision_per_mode(make_workspace):
    assert decide(make_workspace('[sandbox]\nmode = "off"\n'), _FakeBackends(None)).backend is None
    auto = decide(make_workspace(""), _FakeBackends(_Unavailable()))
    assert auto.backend is None and "bwrap not found" in auto.note
    with pytest.raises(Refused) as refused:
        decide(make_workspace('[sandbox]\nmode = "required"\n'), _FakeBackends(_Unavailable()))
    assert refused.value.rule == "sandbox.mode" and "bwrap not found" in refused.value.message


def test_denial_hints(make_workspace):
    ws = make_workspace("")
    root = ws.root
    git = denial_hint(ws, f"error: could not lock config file {root}/.git/config: Read-only file system", 255)
    assert git.likely and git.rule == "filesystem.protected"
    etc = denial_hint(ws, "touch: cannot touch '/etc/x': Read-only file system", 1)
    assert etc.likely and etc.rule == "filesystem.paths['/']"
    net = denial_hint(ws, "curl: (6) Could not resolve host: example.com", 6)
    assert net.likely and net.rule == "network.access"
    sigsys = denial_hint(ws, "", 159)
    assert sigsys.likely and "seccomp" in sigsys.rule
    assert denial_hint(ws, "make: *** [all] Error 2", 2).likely is False
    assert denial_hint(ws, "anything", 0) is None


class _NamedEngines:
    def __init__(self, available: bool) -> None:
        self.available = available

    def info(self) -> SandboxInfo:
        return SandboxInfo(engine="alpha", available=self.available, engines=["alpha", "beta"])

    def wrap(self, spec, layout):  # pragma: no cover - never reached: the decision refuses first
        return spec


class _OneSandbox:
    def __init__(self, sandbox) -> None:
        self._sandbox = sandbox

    def sandbox(self):
        return self._sandbox


@pytest.mark.parametrize("mode", ["auto", "required"])
@pytest.mark.parametrize("available", [True, False])
def test_an_engine_the_sandbox_does_not_offer_is_refused_in_every_mode(make_workspace, mode, available):
    """A misspelt [sandbox] engine must not run commands unsandboxed (mode 'auto') or with
    another engine: the names come from the sandbox plugin, the core checks them."""
    ws = make_workspace(f'[sandbox]\nmode = "{mode}"\nengine = "gamma"\n')
    with pytest.raises(Refused) as refused:
        decide(ws, _OneSandbox(_NamedEngines(available)))
    assert refused.value.rule == "sandbox.engine"
    assert "'gamma'" in refused.value.message and "alpha, beta" in refused.value.message


def test_an_engine_the_sandbox_offers_is_passed_on(make_workspace):
    ws = make_workspace('[sandbox]\nmode = "required"\nengine = "beta"\n')
    sandbox = _NamedEngines(True)
    assert decide(ws, _OneSandbox(sandbox)).backend is sandbox

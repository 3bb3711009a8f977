"""The plugin as the host sees it: entry point, pin, hooks, plan(), doctor."""

from __future__ import annotations

from importlib.metadata import distribution

import pytest

from codespace.contract import Patcher, ToolError
from codespace.plugins import Plugins, pin_from_metadata
from codespace_patch.backend import PatchBackend


def test_entry_point_and_pin():
    dist = distribution("codespace-patch")
    assert [(ep.group, ep.name, ep.value) for ep in dist.entry_points if ep.group == "codespace.plugins"] == [
        ("codespace.plugins", "patch", "codespace_patch.plugin")
    ]
    pin = pin_from_metadata(dist.metadata.get_all("Project-URL"))
    assert str(pin) == "openai/codex rust-v0.171.0 (codex-apply-patch)"
    assert dist.requires == ["codespace<0.3,>=0.2.5", 'pytest>=8; extra == "test"']


def test_loaded_by_the_host_with_its_hooks(workspace):
    plugins = Plugins.load(allow=["patch"], env={})
    info = {i.name: i for i in plugins.listing()}["patch"]
    assert info.status == "loaded" and info.error is None
    assert info.hooks == ["codespace_doctor", "codespace_patcher", "codespace_pin_checks", "codespace_startup"]
    backend, provider = plugins.patcher(workspace)
    assert provider == "patch" and isinstance(backend, Patcher)


def test_plan_lists_every_target_absolute_and_normalised(ws):
    plan = PatchBackend(1 << 20).plan(
        "*** Begin Patch\n*** Add File: a/../b.txt\n+x\n*** Delete File: /abs/d\n"
        "*** Update File: ./u\n*** Move to: ../out/v\n@@\n-x\n+y\n*** Update File: w\n-x\n*** End Patch",
        str(ws),
    )
    assert [(t.path, t.action, t.role) for t in plan.targets] == [
        (f"{ws}/b.txt", "add", "target"),
        ("/abs/d", "delete", "target"),
        (f"{ws}/u", "move", "move_source"),
        (f"{ws.parent}/out/v", "move", "move_destination"),
        (f"{ws}/w", "update", "target"),
    ]


def test_plan_refuses_unparseable_patches_with_upstreams_message(ws):
    with pytest.raises(ToolError) as info:
        PatchBackend(1 << 20).plan("*** Begin Patch\n*** Frobnicate File: x\n*** End Patch", str(ws))
    assert info.value.message.startswith(
        "Invalid patch hunk on line 2: '*** Frobnicate File: x' is not a valid hunk header."
    )
    assert info.value.code == "patch_invalid"
    with pytest.raises(ToolError, match="lone surrogate"):
        PatchBackend(1 << 20).plan("*** Begin Patch\n*** Add File: \ud800\n+x\n*** End Patch", str(ws))


def test_doctor_reports_helper_and_journal(workspace):
    plugins = Plugins.load(allow=["patch"], env={})
    checks = {c.name: c for c in plugins.doctor(workspace)}
    assert checks["patch helper"].ok, checks["patch helper"]
    assert checks["patch journal"].ok and "no interrupted" in checks["patch journal"].detail

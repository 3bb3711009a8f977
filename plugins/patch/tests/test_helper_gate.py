"""The helper implements the core's decision (``codespace.contract.gate``) instead of judging
paths itself: it is refused what the gateway refuses, with the gateway's message."""

from __future__ import annotations

import pytest
from conftest import write
from test_hostile import _hostile, outside  # noqa: F401 - a fixture

from codespace.testing import build_app, call_error, connect
from codespace_patch.conformance.helper import helper_argv, helper_env, run_helper
from codespace_patch.conformance.trees import snapshot

pytestmark = pytest.mark.anyio


async def test_the_helper_is_refused_what_the_gateway_refuses_with_the_same_message(ws, outside, tmp_path, fs_plugin):
    write(ws, {"inside.txt": "in\n"})
    cases = _hostile(ws, outside)
    before_out, before_ws = snapshot(outside), snapshot(ws)
    backend = "real" if fs_plugin == "fs" else "test"
    argv = helper_argv(backend)
    env = {**helper_env(str(tmp_path / "state"), str(tmp_path), backend), "CODESPACE_PATCH_MODE": "atomic"}
    app = build_app(ws, state_dir=tmp_path / "server-state", plugins=("patch", fs_plugin))
    async with connect(app) as client:
        for name, patch in cases:
            error = await call_error(client, "apply_patch", {"patch": patch})
            outcome = run_helper(argv, str(ws), patch, env)
            assert (outcome.code, outcome.stdout) == (1, b""), (name, outcome)
            assert outcome.stderr.decode() == error["message"] + "\n", name
    assert snapshot(outside) == before_out
    assert snapshot(ws) == before_ws


def test_blocking_bytes_answers_what_isinstance_of_the_protocol_answers():
    # The helper asks gate.blocking_bytes instead of isinstance(fs, SyncFileBytes), which
    # would load typing: the method list must be the protocol's, and the answers the same.
    from codespace.contract import SyncFileBytes, gate

    declared = {name for name, value in vars(SyncFileBytes).items() if callable(value) and not name.startswith("_")}
    assert set(gate.BLOCKING_BYTE_METHODS) == declared

    def backend(*names: str) -> object:
        return type("Backend", (), {name: lambda self, *a, **k: None for name in names})()

    for candidate in (backend(*declared), backend(*sorted(declared)[:-1]), backend(), object()):
        assert (gate.blocking_bytes(candidate) is candidate) == isinstance(candidate, SyncFileBytes)
    assert gate.blocking_bytes(backend(*declared)) is not None

"""A server running as root on a workspace a user owns: what the agent creates with the file
tools is the user's, so the user's commands (the sandbox runs them as the workspace owner) can
change it. Real ``codespace serve`` as root, a sandboxed ``exec`` in each engine that works here."""

from __future__ import annotations

import os
import shutil

import pytest
from mcp import Client

from codespace.testing import call_ok

from .servers import UNPRIVILEGED, make_dir, serve_params, shared_tmp
from .test_hidden_paths import ENGINES, _policy

pytestmark = [pytest.mark.anyio,
              pytest.mark.skipif(os.geteuid() != 0, reason="a server running as root on a user's workspace")]


@pytest.mark.parametrize("engine", ENGINES)
async def test_files_the_agent_creates_stay_the_owners_and_its_commands_can_change_them(engine):
    base = shared_tmp("cs-owner-", UNPRIVILEGED)
    try:
        ws, home = make_dir(base / "ws", UNPRIVILEGED), make_dir(base / "home")
        params = serve_params(ws, base / "state", home, policy=_policy(base, engine))
        async with Client(params) as client:
            await call_ok(client, "write_file", {"path": "w.txt", "content": "w\n"})
            await call_ok(client, "write_file", {"path": "deep/er/d.txt", "content": "d\n", "create_parents": True})
            await call_ok(client, "make_dir", {"path": "made"})
            await call_ok(client, "apply_patch", {"patch": "*** Begin Patch\n*** Add File: pt/p.txt\n+p\n*** End Patch\n"})
            ran = await call_ok(client, "exec", {"command": "id -u; for f in w.txt deep/er/d.txt pt/p.txt; do "
                                                            "echo more >> $f || echo FAILED $f; done; "
                                                            "touch made/inside deep/er/inside || echo FAILED dirs"})
            assert ran["exit_code"] == 0 and "FAILED" not in ran["output"], ran
        for rel in ("w.txt", "deep", "deep/er", "deep/er/d.txt", "made", "pt", "pt/p.txt"):
            assert os.stat(ws / rel).st_uid == UNPRIVILEGED, rel
        assert (ws / "pt" / "p.txt").read_text() == "p\nmore\n"
    finally:
        shutil.rmtree(base, ignore_errors=True)

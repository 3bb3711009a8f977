"""The runner in a real worker process, called on its socket directly (no server in front):
it judges every request against the policy it loaded itself."""

from __future__ import annotations

import base64
import hashlib
import importlib.util

import pytest

from .conftest import runner_client as _client, runner_refusal as _refusal

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]


async def test_the_worker_refuses_what_its_own_policy_forbids(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        read, _ = await client.call("fs.read_file", {"path": f"{ws}/ok.txt"})
        assert read["content"] == "fine\n"

        hidden = await _refusal(client, "fs.read_file", {"path": f"{ws}/secret/key.txt"})
        assert hidden.code == "refused" and hidden.dispatched is False
        assert hidden.data["exception"]["rule"] == "filesystem.paths['secret']"
        assert "forbids any access" in hidden.message

        readonly = await _refusal(client, "fs.write_file", {"path": f"{ws}/vendor/lib.txt", "content": "x"})
        assert readonly.code == "refused" and readonly.data["exception"]["rule"] == "filesystem.paths['vendor']"
        protected = await _refusal(client, "fs.remove", {"path": f"{ws}/.git/config"})
        assert protected.data["exception"]["rule"] == "filesystem.protected"
        moved = await _refusal(client, "fs.move", {"source": f"{ws}/ok.txt", "destination": f"{ws}/secret/ok.txt"})
        assert moved.data["exception"]["rule"] == "filesystem.paths['secret']"
        raw = await _refusal(client, "fs.read_bytes", {"path": f"{ws}/secret/key.txt", "max_bytes": 100})
        assert raw.code == "refused" and raw.dispatched is False
        through = await _refusal(client, "fs.write_bytes", {"path": f"{ws}/vendor/lib.txt", "follow_symlink": True,
                                                            "data": base64.b64encode(b"x").decode()})
        assert through.data["exception"]["rule"] == "filesystem.paths['vendor']"
        patch = "*** Begin Patch\n*** Add File: secret/new.txt\n+x\n*** End Patch"
        patched = await _refusal(client, "patch.apply", {"patch": patch, "cwd": ws})
        assert patched.code == "refused" and patched.dispatched is False
        assert not (runner_worker.workspace / "secret" / "new.txt").exists()
        assert (runner_worker.workspace / "vendor" / "lib.txt").read_text() == "v\n"
        assert (runner_worker.workspace / ".git" / "config").exists()

        # Paths the server would never send: relative, not normalised, outside by '..', NUL.
        for path in ("ok.txt", f"{ws}/../ws/secret/key.txt", f"{ws}/./ok.txt", f"{ws}/ok\x00.txt", ""):
            odd = await _refusal(client, "fs.read_file", {"path": path})
            assert odd.code == "refused" and odd.dispatched is False, (path, odd.message)
            assert odd.data["exception"]["rule"] == "path syntax"

        bad = await _refusal(client, "fs.read_file", {"path": f"{ws}/ok.txt", "offset": 0})
        assert bad.code == "bad_params" and bad.dispatched is False and "params.offset" in bad.message
        extra = await _refusal(client, "fs.stat", {"path": f"{ws}/ok.txt", "evil": True})
        assert extra.code == "bad_params"
        missing = await _refusal(client, "fs.read_bytes", {"path": f"{ws}/ok.txt"})
        assert missing.code == "bad_params" and "max_bytes" in missing.message

        # A backend's own failure ran (dispatched) and keeps its type and errno.
        absent = await _refusal(client, "fs.read_file", {"path": f"{ws}/absent.txt"})
        assert absent.code == "not_found" and absent.dispatched is True
        assert absent.data["exception"]["type"] == "FsError" and absent.data["exception"]["errno"] == 2

        # Still serving, with the policy it loaded and the in-process backends (it is the runner).
        status, _ = await client.call("status", {})
        assert status["policy_digest"] == hashlib.sha256(runner_worker.policy.read_bytes()).hexdigest()
        assert client.welcome.policy_digest == status["policy_digest"]
        assert status["backends"] == {"filesystem": "fs", "patcher": "patch"}
        assert status["serves"] == ["files", "patch", "commands"] and status["commands"] == "worker"
        assert (await client.call("ping", {}))[0] == {"pong": True}
    finally:
        await client.close()


async def test_raw_file_calls_round_trip(runner_worker):
    ws = str(runner_worker.workspace)
    client = await _client(runner_worker)
    try:
        data = bytes(range(256)) * 10
        await client.call("fs.write_bytes", {"path": f"{ws}/new/raw.bin", "data": base64.b64encode(data).decode(),
                                            "create_parents": True, "durable": False})
        await client.call("fs.sync", {})
        got, _ = await client.call("fs.read_bytes", {"path": f"{ws}/new/raw.bin", "max_bytes": 1 << 20})
        assert base64.b64decode(got["data"]) == data
        assert (await client.call("fs.kind", {"path": f"{ws}/new"}))[0] == {"kind": "directory"}
        await client.call("fs.delete_file", {"path": f"{ws}/new/raw.bin"})
        assert (await client.call("fs.kind", {"path": f"{ws}/new/raw.bin"}))[0] == {"kind": None}
        too_big = await _refusal(client, "fs.read_bytes", {"path": f"{ws}/ok.txt", "max_bytes": 2})
        assert too_big.data["exception"]["type"] == "FsError"
        not_b64 = await _refusal(client, "fs.write_bytes", {"path": f"{ws}/x", "data": "***"})
        assert not_b64.code == "bad_params" and not (runner_worker.workspace / "x").exists()
    finally:
        await client.close()

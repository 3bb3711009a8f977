"""With the worker on, every file tool and apply_patch gives, byte for byte, what the server
gives in-process: results, texts, errors and their ``_meta``. The same script of calls runs
against two servers on two identical trees; the raw MCP results are compared as JSON."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import importlib.util

import pytest

from codespace.testing import build_app, connect

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(
    importlib.util.find_spec("codespace_fs") is None or importlib.util.find_spec("codespace_patch") is None,
    reason="the worker serves codespace-fs and codespace-patch, which this environment lacks")]

FIXED_TIME = 1_700_000_000
PATCH_OK = "\n".join([
    "*** Begin Patch", "*** Add File: new/created.txt", "+hello", "*** Delete File: gone.txt",
    "*** Update File: src/app.py", "@@ def main():", "-    return 1", "+    return 2",
    "*** Update File: old.txt", "*** Move to: moved/old.txt", "@@", " keep", "-x", "+y", "*** End Patch",
])


def _patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


# (tool, arguments): successes and failures of every file tool and of apply_patch, in an order
# where no result depends on a modification time the two runs cannot share.
SCRIPT: list[tuple[str, dict]] = [
    ("read_file", {"path": "src/app.py"}),
    ("read_file", {"path": "big.txt", "offset": 3, "limit": 5}),
    ("read_file", {"path": "big.txt", "max_bytes": 1024}),
    ("read_file", {"path": "bin.dat"}),
    ("read_file", {"path": "bin.dat", "encoding": "base64", "byte_offset": 2}),
    ("read_file", {"path": "bad.txt", "errors": "replace"}),
    ("read_file", {"path": "missing.txt"}),
    ("read_file", {"path": "src"}),
    ("read_file", {"path": "secret/key.txt"}),
    ("read_file", {"path": "link-out"}),
    ("list_dir", {"path": "."}),
    ("list_dir", {"path": "src", "include_hidden": False}),
    ("list_dir", {"path": "missing"}),
    ("walk", {"path": "."}),
    ("walk", {"path": ".", "include": ["*.py"], "sizes": True}),
    ("walk", {"path": ".", "max_entries": 2}),
    ("stat", {"path": "src/app.py"}),
    ("stat", {"path": "link-in"}),
    ("stat", {"path": "link-in", "follow_symlinks": True}),
    ("stat", {"path": "nothing-here"}),
    ("write_file", {"path": "w.txt", "content": "one\n", "operation_id": "p-w1"}),
    ("write_file", {"path": "w.txt", "content": "two\n", "expected_sha256": "0" * 64, "operation_id": "p-w2"}),
    ("write_file", {"path": "w.txt", "content": "three\n", "must_not_exist": True, "operation_id": "p-w3"}),
    ("write_file", {"path": "deep/er/w.txt", "content": "x", "operation_id": "p-w4"}),
    ("write_file", {"path": "deep/er/w.txt", "content": "x", "create_parents": True, "operation_id": "p-w5"}),
    ("write_file", {"path": ".git/config", "content": "x", "operation_id": "p-w6"}),
    ("write_file", {"path": "w.txt", "content": "one\n", "operation_id": "p-w1"}),  # replayed
    ("make_dir", {"path": "made/a/b", "operation_id": "p-m1"}),
    ("make_dir", {"path": "made/a/b", "exist_ok": False, "operation_id": "p-m2"}),
    ("make_dir", {"path": "w.txt/sub", "operation_id": "p-m3"}),
    ("move", {"source": "w.txt", "destination": "moved.txt", "operation_id": "p-v1"}),
    ("move", {"source": "moved.txt", "destination": "src/app.py", "operation_id": "p-v2"}),
    ("move", {"source": "nope", "destination": "nope2", "operation_id": "p-v3"}),
    ("remove", {"path": "moved.txt", "operation_id": "p-r1"}),
    ("remove", {"path": "made", "operation_id": "p-r2"}),
    ("remove", {"path": "made", "recursive": True, "operation_id": "p-r3"}),
    ("remove", {"path": ".", "recursive": True, "operation_id": "p-r4"}),
    ("remove", {"path": "absent", "force": True, "operation_id": "p-r5"}),
    ("apply_patch", {"patch": PATCH_OK, "dry_run": True, "operation_id": "p-a0"}),
    ("apply_patch", {"patch": PATCH_OK, "operation_id": "p-a1"}),
    ("apply_patch", {"patch": _patch("*** Update File: src/app.py", "@@", "-not there", "+x"),
                     "operation_id": "p-a2"}),
    ("apply_patch", {"patch": "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch", "operation_id": "p-a3"}),
    ("apply_patch", {"patch": _patch("*** Add File: .git/hooks/pre-commit", "+evil"), "operation_id": "p-a4"}),
    ("apply_patch", {"patch": _patch("*** Add File: ok1.txt", "+a", "*** Update File: missing.txt", "@@",
                                     "-a", "+b"), "mode": "upstream", "operation_id": "p-a5"}),
    ("apply_patch", {"patch": _patch("*** Delete File: link-in"), "operation_id": "p-a6"}),
    ("read_file", {"path": "moved/old.txt"}),
    ("get_operation", {"operation_id": "p-a2"}),
    ("get_operation", {"operation_id": "p-w2"}),
]


def make_tree(root: Path, outside: Path) -> None:
    files = {
        "src/app.py": "def main():\n    return 1\n", "src/.hidden": "h\n", "gone.txt": "bye\n",
        "old.txt": "keep\nx\n", "big.txt": "".join(f"line {i}\n" for i in range(400)),
        "bin.dat": bytes(range(256)), "bad.txt": b"ok\xff\xfeok\n", "secret/key.txt": "k\n",
        ".git/config": "[core]\n",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    outside.mkdir(exist_ok=True)
    (outside / "s.txt").write_text("outside\n")
    os.symlink("src/app.py", root / "link-in")
    os.symlink(str(outside / "s.txt"), root / "link-out")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (FIXED_TIME, FIXED_TIME), follow_symlinks=False)
    os.utime(root, (FIXED_TIME, FIXED_TIME))


# What two runs cannot share: a generated operation id (a refusal's) and a change time (utime
# cannot set it). Everything else is compared as sent.
_GENERATED_ID = re.compile(r"op-[0-9a-f]{12}-[0-9a-f]{10}")
_CTIME = re.compile(r'(\\?"ctime_ms\\?": )\d+')


def _unshared(line: str) -> str:
    return _CTIME.sub(r"\1<ctime>", _GENERATED_ID.sub("<generated id>", line))


POLICY = '[filesystem]\npaths = { "secret" = "none", "OUTSIDE" = "none" }\n'


async def run_script(parent: Path, worker: str) -> list[str]:
    # The same paths for both runs (results name absolute paths): one run, then the other, in
    # the same directory, each on a fresh tree.
    ws, state = parent / "ws", parent / "state"
    make_tree(ws, parent / "outside")
    policy = POLICY.replace("OUTSIDE", str(parent / "outside")) + f'[runtime]\nworker = "{worker}"\n'
    app = build_app(ws, state_dir=state, policy=policy)
    out = []
    async with connect(app) as client:
        for tool, args in SCRIPT:
            result = await client.call_tool(tool, args)
            raw = {"is_error": result.is_error, "content": [c.model_dump() for c in result.content],
                   "structured": result.structured_content, "meta": result.meta}
            if tool == "get_operation" and raw["structured"]:  # when it ran differs between the runs
                for key in ("created_at", "finished_at"):
                    raw["structured"].pop(key, None)
                raw["content"] = []
            out.append(_unshared(json.dumps(raw, sort_keys=True, ensure_ascii=False)))
        info = await client.call_tool("workspace_info", {})
    return out, info.structured_content


async def test_every_file_tool_and_patch_result_is_byte_identical(tmp_path):
    import shutil

    parent = tmp_path / "p"
    parent.mkdir()
    in_process, info_off = await run_script(parent, "off")
    shutil.rmtree(parent)
    parent.mkdir()
    with_worker, info_child = await run_script(parent, "child")
    assert info_off["runtime"]["worker"] == "off" and "worker_socket" not in info_off["server"]["protocols"]
    assert info_child["runtime"]["serving"] is True, info_child["runtime"]
    assert info_child["server"]["protocols"]["worker_socket"] == 5
    differences = [(SCRIPT[i], a, b) for i, (a, b) in enumerate(zip(in_process, with_worker)) if a != b]
    assert not differences, "\n\n".join(f"{call}\n in-process: {a}\n worker:     {b}" for call, a, b in differences)
    # The script reaches errors of every kind, not only successes.
    errors = sum('"is_error": true' in line for line in in_process)
    assert errors >= 15 and len(in_process) - errors >= 20

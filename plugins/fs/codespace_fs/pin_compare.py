"""The fs plugin's pin check: ``fs/*`` of upstream's exec-server against our FileSystem backend.

The backend is the one a server would use: the plugin's ``codespace_filesystem``
hook for a workspace from ``codespace.contract.gate.open_workspace``. Each operation
gives a normalised fact on each side (``pin_sides``); after all of them, the two
trees must hold the same entries. Differences we make on purpose carry the reason
from :data:`LISTED` (the README's "Deliberate differences" lists the same words).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import anyio

from codespace.contract import (OracleUnavailable, PinCheck, PinCheckRequest, PinDifference, PinReport,
                                UpstreamRpc, UpstreamRpcClosed)
from codespace.contract.gate import open_workspace

from .backend import FsBackend
from .pin_cases import Op, Tree, generate_tree, operations
from .resolve import MODE_ENV, choose_mode
from .pin_sides import Fact, our_fact, snapshot, upstream_fact

PLUGIN = "codespace-fs"
COMPONENT = "codex-file-system"
CI_SEED = 171
CI_TREES, CI_OPS = 3, 40
DEFAULT_TREES, DEFAULT_OPS = 10, 150

LISTED = {
    "no_follow": "Reads and writes do not follow a symbolic link at the path (the agent names the target "
                 "instead); upstream follows it.",
    "list_links": "A listing shows a symbolic link as a link, never followed, dangling ones included; upstream "
                  "reports the kind of its target and leaves out links to nothing.",
    "ceiling": "Reads stop at the policy's limits.max_file_bytes (64 MiB by default, never above upstream's "
               "512 MiB); upstream reads up to 512 MiB.",
}


def _listed(op: Op, tree: Tree, ours: Fact, upstream: Fact) -> str | None:
    linked = op.path in tree.links
    if op.kind in ("read", "write") and linked and ours == ("error", "symlink_refused"):
        return LISTED["no_follow"]
    if op.kind == "read" and op.path in tree.sparse and ours == ("error", "too_large") and upstream[0] == "ok":
        return LISTED["ceiling"]
    if op.kind == "list" and ours[0] == upstream[0] == "ok":
        theirs = dict(upstream[1])
        kept = [(name, kind) for name, kind in ours[1] if name in theirs or kind != "link"]
        if len(kept) == len(upstream[1]) and all(
                a == b or (a[0] == b[0] and a[1] == "link") for a, b in zip(kept, upstream[1])):
            return LISTED["list_links"]
    return None


def _show(fact: Fact) -> str:
    state, value = fact
    if state == "ok" and isinstance(value, bytes):
        return f"ok {len(value)} bytes"
    return f"{state} {value!r}"[:300]


def _resync(op: Op, tree: Tree, ours_root: Path, upstream_root: Path) -> None:
    """After a listed difference in a write, give upstream's tree our state of what it touched,
    so that later operations compare the same trees."""
    for path in {op.path, tree.links.get(op.path, op.path)}:
        source, target = ours_root / path, upstream_root / path
        if source.is_file() and not source.is_symlink():
            shutil.copyfile(source, target)


def check_tree(rpc: UpstreamRpc, seed: int, count: int, base: Path) -> tuple[int, list[PinDifference]]:
    ours_root, upstream_root = base / f"ours-{seed}", base / f"upstream-{seed}"
    ours_root.mkdir()
    upstream_root.mkdir()
    workspace = open_workspace(ours_root, state_dir=str(base / "state"))
    fs = FsBackend(workspace, choose_mode(os.environ.get(MODE_ENV))[0])  # as the plugin's hook builds it
    ceiling = workspace.limits.max_file_bytes
    tree = generate_tree(seed, ceiling_bytes=ceiling)
    tree.write(ours_root)
    tree.write(upstream_root)
    ops = operations(tree, seed, count)
    found = []
    for number, op in enumerate(ops):
        our = anyio.run(our_fact, fs, ours_root, op, ceiling)
        theirs = upstream_fact(rpc, upstream_root, op)
        if our == theirs:
            continue
        listed = _listed(op, tree, our, theirs)
        if listed and op.kind == "write":
            _resync(op, tree, ours_root, upstream_root)
        found.append(PinDifference(f"seed {seed} op {number}: {op.describe()}",
                                   f"ours {_show(our)}, upstream {_show(theirs)}", listed))
    before, after = snapshot(ours_root), snapshot(upstream_root)
    for path in sorted(set(before) | set(after)):
        if before.get(path) != after.get(path):
            found.append(PinDifference(f"seed {seed} tree after the operations: {path}",
                                       f"ours {before.get(path)!r}, upstream {after.get(path)!r}"))
    return len(ops), found


def run(request: PinCheckRequest) -> PinReport:
    report = PinReport(PLUGIN, COMPONENT, request.release, notes=[
        "Compared: contents read, metadata (kind, size of regular files, link or not), listings (names, kinds), "
        "writes, directories made, removals, the error class of each failure, and the trees left behind.",
        "Not compared: walks (exec-server has no walk method; our bounded walk's limits have no upstream "
        "counterpart to drive), times (upstream reports createdAtMs 0 here), permission bits (not reported "
        "upstream), and moves/copies (fs/copy copies, our move renames: no shared operation).",
    ])
    seed = request.seed if request.seed is not None else CI_SEED
    trees, count = (CI_TREES, CI_OPS) if request.ci else (DEFAULT_TREES, DEFAULT_OPS)
    if request.cases is not None:
        count = request.cases
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="codespace-fs-pin-"))
    try:
        with UpstreamRpc.exec_server(request.codex) as rpc:
            for index in range(trees):
                cases, found = check_tree(rpc, seed + index, count, base)
                report.cases += cases
                report.differences.extend(found)
    except (UpstreamRpcClosed, OSError) as exc:
        report.unavailable = f"the upstream exec-server stopped answering: {exc}"
    except OracleUnavailable as exc:
        report.unavailable = str(exc)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.notes.append(f"{report.cases} operations on {trees} trees (seeds {seed}..{seed + trees - 1}) "
                        f"in {time.monotonic() - started:.1f} s")
    return report


PIN_CHECK = PinCheck(PLUGIN, COMPONENT, run)

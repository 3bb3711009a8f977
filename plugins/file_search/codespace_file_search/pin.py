"""The pin check of codespace-file-search: find_files against the pinned binary's
``codex app-server`` ``fuzzyFileSearch`` on generated trees and queries.

A case is one query on one generated tree; it agrees when both give the same list of
(path, match_type, score, indices). Deliberate differences (README "find_files:
differences from upstream") are reported with their reason and do not fail the check:

- a link leading out of the search root is listed but not entered (upstream walks into it);
- at the 50-result cut, among equal scores, we keep fewer path components then lexical
  order, where upstream keeps whichever its parallel walker met first (not reproducible).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

from codespace.contract import PinCheck, PinCheckRequest, PinDifference, PinReport

from .pin_cases import Case, build, generate
from .query import parse
from .ranking import LIMIT, rank
from .walk import walk

PLUGIN = "codespace-file-search"
COMPONENT = "codex-file-search"
CI_SEED = 171
CI_TREES = 60
DEFAULT_TREES = 300
OUT_LINK = "outward"
CUT_REASON = ("at the 50-result cut, equal scores are kept by fewer path components then path, "
              "not in upstream's (parallel, unordered) walk order")
OUT_REASON = "links leading out of the search root are listed but not entered"
LISTED = (OUT_REASON, CUT_REASON)
"""The deliberate differences the check accepts, each listed with its reason in README.md."""


def pin_check() -> PinCheck:
    return PinCheck(plugin=PLUGIN, component=COMPONENT, run=run)


def ours(query: str, root: str) -> list[tuple]:
    found, _ = rank(parse(query), walk(root).entries)
    return [(r.path, "directory" if r.is_dir else "file", r.score, r.indices) for r in found]


def theirs(server, query: str, root: str) -> list[tuple]:  # noqa: ANN001
    return [(f["path"], f["match_type"], f["score"], f["indices"] or []) for f in server.fuzzy_file_search(query, [root])]


def compare(mine: list[tuple], upstream: list[tuple]) -> tuple[str | None, str | None]:
    """(detail, listed reason) of a difference, or (None, None) when the lists agree."""
    if mine == upstream:
        return None, None
    out = [u for u in upstream if u[0].startswith(OUT_LINK + "/")]
    if out:
        rest = [u for u in upstream if not u[0].startswith(OUT_LINK + "/")]
        if len(upstream) < LIMIT and rest == mine:
            return f"upstream also lists {len(out)} path(s) through the outward link", OUT_REASON
    if len(mine) == len(upstream) == LIMIT:
        cut = upstream[-1][2]
        if cut == mine[-1][2] and [m for m in mine if m[2] > cut] == [u for u in upstream if u[2] > cut]:
            return "the same list above the cut score; different equal-score entries at the cut", CUT_REASON
    return _describe(mine, upstream), None


def _describe(mine: list[tuple], upstream: list[tuple]) -> str:
    for i, (a, b) in enumerate(zip(mine, upstream)):
        if a != b:
            return f"first difference at #{i}: ours {a} upstream {b} (ours {len(mine)}, upstream {len(upstream)})"
    longer = "ours" if len(mine) > len(upstream) else "upstream"
    extra = (mine if len(mine) > len(upstream) else upstream)[min(len(mine), len(upstream))]
    return f"{longer} has more results ({len(mine)} vs {len(upstream)}), first extra {extra}"


def _with_outward(case: Case, rng: random.Random) -> bool:
    if rng.random() < 0.1:
        case.links.append((OUT_LINK, "../outside"))
        case.tags.add("link-out")
        return True
    return False


def run(request: PinCheckRequest) -> PinReport:
    from .pin_client import AppServer, AppServerError

    seed = CI_SEED if request.seed is None and request.ci else (request.seed if request.seed is not None
                                                                 else random.randrange(1, 10**6))
    trees = request.cases or (CI_TREES if request.ci else DEFAULT_TREES)
    report = PinReport(plugin=PLUGIN, component=COMPONENT, release=request.release)
    base = tempfile.mkdtemp(prefix="codespace-find-pin-")
    try:
        with AppServer(request.codex) as server:
            for index in range(trees):
                _run_tree(server, seed, index, base, report)
                if (index + 1) % 50 == 0:
                    request.log(f"  ... {index + 1}/{trees} trees, {report.cases} cases")
    except AppServerError as exc:
        report.unavailable = f"codex app-server: {exc}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report.notes.append(f"seed {seed}, {trees} trees, {report.cases} cases (a query on a tree each); "
                        "upstream's parent-directory ignore files and global git excludes are not generated")
    return report


def _run_tree(server, seed: int, index: int, base: str, report: PinReport) -> None:  # noqa: ANN001
    case = generate(seed, index)
    holder = os.path.realpath(tempfile.mkdtemp(dir=base))
    root = os.path.join(holder, "root")
    os.mkdir(root)
    os.mkdir(os.path.join(holder, "outside"))
    with open(os.path.join(holder, "outside", "secret_main.txt"), "w") as f:
        f.write("outside\n")
    _with_outward(case, random.Random(seed * 7 + index))
    build(case, root)
    for query in case.queries:
        report.cases += 1
        detail, listed = compare(ours(query, root), theirs(server, query, root))
        if detail is not None:
            report.differences.append(PinDifference(f"seed {seed} tree {index} query {query!r}", detail, listed))
    shutil.rmtree(holder, ignore_errors=True)

"""A short differential run against the pinned binary, when it is in the cache.

The full run (and the download) belongs to ``pin_check.py``; this keeps a quick
version of it in the test suite so a behaviour change shows up in pytest too.
"""

from __future__ import annotations

import pytest

from codespace_patch.conformance.differential import run_cases
from codespace_patch.conformance.fuzz import generate
from codespace_patch.conformance.oracle import OracleUnavailable, ensure_oracle

try:
    ORACLE = ensure_oracle(fetch=False)
except OracleUnavailable as exc:
    ORACLE = None
    WHY = str(exc)


@pytest.mark.skipif(ORACLE is None, reason="the pinned codex binary is not cached; run pin_check.py")
def test_generated_cases_agree_with_the_binary(fs_plugin):
    backend = "real" if fs_plugin == "fs" else "test"
    verdicts = run_cases([generate(20240171, i) for i in range(40)], ORACLE, backend=backend)
    bad = [f"case {v.case.index} {v.case.tags}:\n{v.problem}" for v in verdicts if not v.ok]
    assert not bad, "\n".join(bad)
    assert sum(v.upstream_code == 0 for v in verdicts) >= 10  # the run applied patches, not only errors


def test_generation_is_reproducible():
    assert generate(7, 3) == generate(7, 3)
    assert generate(7, 3) != generate(7, 4)

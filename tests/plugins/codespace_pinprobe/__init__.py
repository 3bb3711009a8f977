"""A third party's pin check, for ``codespace pins check`` (tests/test_pins_check.py).

It compares one real thing: what the binary it is handed reports as its version against
the release it is asked about. ``CODESPACE_PINPROBE`` chooses what else it reports, so the
command's handling of every kind of outcome can be seen from outside:
``agree``, ``noisy`` (agrees, printing to stdout itself and from a child), ``listed`` (a deliberate difference), ``unlisted`` (a listed and then an
unlisted one), ``raise``, ``unavailable``, ``empty`` (no case compared), ``garbage`` (not a
PinReport), ``hook`` (the hook itself raises). ``CODESPACE_PINPROBE_RECORD`` names a file
that receives the request as JSON.
"""

import json
import os
import subprocess
import tempfile

from codespace import hookimpl
from codespace.contract import PinCheck, PinDifference, PinReport

PLUGIN = "codespace-pinprobe"
COMPONENT = "codex-probe"


def _version_case(request, report):
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run([str(request.codex), "--version"], capture_output=True, text=True, timeout=60,
                              env={"HOME": home, "PATH": "/usr/bin:/bin"})
    report.cases += 1
    want = f"codex-cli {request.version}"
    if done.stdout.strip() != want:
        report.differences.append(PinDifference("codex --version", f"{done.stdout.strip()!r}, expected {want!r}"))


def _record(request):
    where = os.environ.get("CODESPACE_PINPROBE_RECORD")
    if where:
        with open(where, "w") as f:
            json.dump({"release": request.release, "codex": str(request.codex), "ci": request.ci,
                       "seed": request.seed, "cases": request.cases}, f)


def run(request):
    mode = os.environ.get("CODESPACE_PINPROBE", "agree")
    _record(request)
    request.log(f"pinprobe: mode {mode}")
    if mode == "noisy":
        print("noise from the check")
        subprocess.run(["echo", "noise from its child"], check=True)
    if mode == "raise":
        raise RuntimeError("the probe broke on purpose")
    if mode == "garbage":
        return {"cases": 1}
    report = PinReport(PLUGIN, COMPONENT, request.release)
    if mode == "empty":
        return report
    if mode == "unavailable":
        report.unavailable = "the probe's tool is missing on purpose"
        return report
    _version_case(request, report)
    report.notes.append("the probe compares the binary's version only")
    if mode in ("listed", "unlisted"):
        report.cases += 1
        report.differences.append(PinDifference("probe listed", "ours says A, upstream B",
                                                listed="README-probe: we say A on purpose"))
    if mode == "unlisted":
        report.cases += 1
        report.differences.append(PinDifference("probe unlisted", "ours says C, upstream D"))
    return report


@hookimpl
def codespace_pin_checks():
    if os.environ.get("CODESPACE_PINPROBE") == "hook":
        raise ValueError("the probe's hook broke on purpose")
    return [PinCheck(PLUGIN, COMPONENT, run)]

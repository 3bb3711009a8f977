"""Run a sandboxed unix_probe.py the way the tests do, as whichever user starts this script
(the tests start it through setpriv as an unprivileged user): argv engine, start, targets and,
optionally, the probe's file name (default unix_probe.py)."""

import json
import os
import shutil
import site
import sys
import tempfile
from pathlib import Path

if os.environ.get("CODESPACE_TEST_SITE"):  # a system python the user can run, with the venv's packages
    site.addsitedir(os.environ["CODESPACE_TEST_SITE"])
sys.path.insert(0, str(Path(__file__).parent))

from codespace_linux_sandbox.backend import interpreter  # noqa: E402
from conftest import _base_dir, make_env  # noqa: E402

engine, start, targets = sys.argv[1], sys.argv[2], sys.argv[3]
base = Path(tempfile.mkdtemp(prefix="codespace-sandbox-test-", dir=_base_dir()))
try:
    env = make_env(base, engine, start=start)
    probe = sys.argv[4] if len(sys.argv) > 4 else "unix_probe.py"
    code, out, err = env.run([interpreter(), "-I", "-S", str(Path(__file__).with_name(probe)), targets], timeout=120)
finally:
    shutil.rmtree(base, ignore_errors=True)
print(json.dumps({"code": code, "out": out, "err": err}))

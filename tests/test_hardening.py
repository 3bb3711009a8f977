"""codespace.contract.hardening: what every helper process runs first (DESIGN.md §6).

The helpers' own tests check it from outside while they run (plugins/patch/tests/test_cli.py,
plugins/linux_sandbox/tests/test_hardening.py and test_fast_path.py)."""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys

from codespace.contract import hardening
from codespace.contract.hardening import harden_process

PR_GET_DUMPABLE = 3

HARDENING_PROBE = """
import ctypes, os, resource, sys
from codespace.contract.hardening import harden_process
harden_process()
libc = ctypes.CDLL(None)
print(libc.prctl(3, 0, 0, 0, 0), resource.getrlimit(resource.RLIMIT_CORE), sorted(k for k in os.environ if k.startswith("LD_")))
"""


def test_harden_process_in_a_child():
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            os.environ["LD_CODESPACE_TEST"] = "1"
            os.putenv("LD_CODESPACE_TEST", "1")
            harden_process()
            libc = ctypes.CDLL(None)
            ok = (libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
                  and resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)
                  and "LD_CODESPACE_TEST" not in os.environ)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_hardening():
    env = {**os.environ, "LD_PRELOAD": "", "LD_LIBRARY_PATH": "/nonexistent", "LD_FOO": "1"}
    done = subprocess.run([sys.executable, "-c", HARDENING_PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "0 (0, 0) []", done.stderr


def test_upstreams_exit_codes():
    assert (hardening.PRCTL_FAILED_EXIT_CODE, hardening.SET_RLIMIT_CORE_FAILED_EXIT_CODE) == (5, 7)
    error = hardening.HardeningError("prctl(PR_SET_DUMPABLE, 0) failed: test", hardening.PRCTL_FAILED_EXIT_CODE)
    assert (str(error), error.exit_code) == ("prctl(PR_SET_DUMPABLE, 0) failed: test", 5)


def test_loads_from_its_file_alone_and_defers_the_ffi():
    """The sandbox helper loads the file by its path, with nothing of the core importable: the module
    needs only ``posix`` until :func:`harden_process` runs (then ``_ctypes``, never ``ctypes``)."""
    probe = (
        "import posix, sys\n"
        "from _frozen_importlib_external import SourceFileLoader\n"
        "m = type(posix)('h'); m.__file__ = sys.argv[1]\n"
        "before = set(sys.modules)\n"
        "SourceFileLoader('h', sys.argv[1]).exec_module(m)\n"
        "loaded = sorted(set(sys.modules) - before)\n"
        "m.harden_process()\n"
        "print(loaded, sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe, hardening.__file__], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip() == "[] ['_ctypes']", done.stderr

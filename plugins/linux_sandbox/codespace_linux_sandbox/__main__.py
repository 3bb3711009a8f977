"""Fast entry point: ``python -I -S <path of this file>`` (no site, no PYTHON* variables).

With ``-I`` the script's directory is not on ``sys.path``, so the package's parent is put
there by hand. This file stays tiny: ``__main__`` is compiled from source on every run,
the modules it imports come from their cached bytecode.
"""

import posix
import sys

if not __package__:
    sys.path.insert(0, __file__.rpartition("/")[0].rpartition("/")[0])
from codespace_linux_sandbox.entry import main

posix._exit(main())  # skip interpreter finalization (milliseconds): nothing is buffered

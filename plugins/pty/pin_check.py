#!/usr/bin/env python3
"""Pin check for codespace-pty: does a terminal session show what upstream's shows?

    python plugins/pty/pin_check.py --ci                     # CI: fixed cases + 28 generated, seed 171
    python plugins/pty/pin_check.py --cases 300 --seed 9     # a longer run
    python plugins/pty/pin_check.py --release rust-v0.169.0  # against another release

The release's binary is fetched with ``npm pack`` into ~/.cache/codespace (once) and
its ``codex exec-server`` and ``codex app-server`` are the oracle (see README.md, "Pin
check"). The report goes to stdout; exit 0 when the check agrees (only listed
differences), 1 when an unlisted difference was found, 2 when it could not run.
"""

import sys

from codespace.contract import pin_check_command_line
from codespace_pty.pin_compare import PIN_CHECK

if __name__ == "__main__":
    sys.exit(pin_check_command_line(PIN_CHECK, doc=__doc__, cases_help="generated cases (default: 28 with --ci, else 140)"))

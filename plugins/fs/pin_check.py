#!/usr/bin/env python3
"""Pin check for codespace-fs: do our file operations give upstream's facts?

    python plugins/fs/pin_check.py --ci                     # CI: 3 trees x (fixed probes + 40 generated ops), seed 171
    python plugins/fs/pin_check.py --cases 300 --seed 9     # 10 trees, 300 generated ops each
    python plugins/fs/pin_check.py --release rust-v0.169.0  # against another release

The release's binary is fetched with ``npm pack`` into ~/.cache/codespace (once) and
its ``codex exec-server`` fs/* methods are the oracle (see README.md, "Pin
check"). The report goes to stdout; exit 0 when the check agrees (only listed
differences), 1 when an unlisted difference was found, 2 when it could not run.
"""

import sys

from codespace.contract import pin_check_command_line
from codespace_fs.pin_compare import PIN_CHECK

if __name__ == "__main__":
    sys.exit(pin_check_command_line(PIN_CHECK, doc=__doc__, cases_help="generated operations per tree (default: 40 with --ci, else 150)"))

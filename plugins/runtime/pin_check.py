#!/usr/bin/env python3
"""Pin check for codespace-runtime: do our socket placement and hardening behave as upstream's?

    python plugins/runtime/pin_check.py                          # both components, against the pin
    python plugins/runtime/pin_check.py --release rust-v0.169.0  # against another release
    python plugins/runtime/pin_check.py --component codex-uds    # one of them

The release's binary is fetched with ``npm pack`` into ~/.cache/codespace (once); its
``app-server --listen unix://PATH`` and its hardened voice helper are the oracle (see README.md,
"Pin check"). The check has no generated cases, so ``--ci`` is accepted and changes nothing. The
report goes to stdout; exit 0 when every check agrees (only listed differences), 1 when an
unlisted difference was found, 2 when a check could not run.
"""

import sys

from codespace.contract import pin_check_command_line
from codespace_runtime.pin_check import checks

if __name__ == "__main__":
    sys.exit(pin_check_command_line(checks(), doc=__doc__))

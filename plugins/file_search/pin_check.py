#!/usr/bin/env python3
"""Pin check for codespace-file-search: does find_files rank as the pinned Codex does?

    python plugins/file_search/pin_check.py --ci                   # CI: fixed seed, 60 trees x 4 queries
    python plugins/file_search/pin_check.py --cases 300 --seed 7   # 300 generated trees (4 queries each)
    python plugins/file_search/pin_check.py --release rust-v0.169.0

Fetches the release's codex binary (npm pack, cached under ~/.cache/codespace), starts one
``codex app-server`` and compares find_files with ``fuzzyFileSearch`` on generated trees.
Exit 0 when every difference is a listed (deliberate) one, 1 otherwise, 2 without an oracle.
"""

import sys

from codespace.contract import pin_check_command_line
from codespace_file_search.pin import pin_check

if __name__ == "__main__":
    sys.exit(pin_check_command_line(pin_check(), doc=__doc__, cases_help="generated trees (each is queried 4 times)"))

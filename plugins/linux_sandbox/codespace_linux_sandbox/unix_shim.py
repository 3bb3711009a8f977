"""In the command's child, inside the sandbox (bubblewrap), before a command whose policy lists
Unix sockets: ``python -I -S unix_shim.py FD -- ARGV...`` adds the connect broker's filter to
this process (see :mod:`.unix_broker`), sends its listener to the helper over FD, and execs ARGV."""

import posix
import sys

if not __package__:
    sys.path.insert(0, __file__.rpartition("/")[0].rpartition("/")[0])
from codespace_linux_sandbox.unix_broker import install  # noqa: E402

channel, argv = int(sys.argv[1]), sys.argv[3:]
try:
    install(channel)
except OSError as exc:
    posix.write(2, f"codespace-linux-sandbox: cannot broker Unix socket connections: {exc}\n".encode())
    posix._exit(125)
try:
    __import__("os").execvp(argv[0], argv)
except OSError as exc:
    posix.write(2, f"codespace-linux-sandbox: cannot run {argv[0]!r}: {exc.strerror}\n".encode())
    posix._exit(126 if exc.errno == 13 else 127)

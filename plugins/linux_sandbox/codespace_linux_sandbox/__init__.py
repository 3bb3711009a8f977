"""CodeSpace's Linux sandbox: a per-command helper confining a command with bubblewrap or Landlock.

Deliberately empty: the helper runs with ``python -I -S`` for every sandboxed command and
imports this package, so nothing here may import pydantic, the core or anything heavy.
Server-side code lives in :mod:`.backend` and :mod:`.plugin`; :mod:`.engines` maps which
code runs in which process (server, warm helper, per-command helper, command's child).
"""

__version__ = "0.2.5"

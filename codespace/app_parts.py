"""The parts of an App that do not need its store: the workspace, its plugins, their tools.

Their own module so that a start without a kept listing can answer ``tools/list`` from
the registry before the rest of the App (the store, the process registry, the gateway)
is imported and built (:mod:`codespace.transports.stdio_serve`); :meth:`App.build` is
these parts and then :meth:`App.assemble`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from .plugins import Plugins
from .tooling import ToolRegistry
from .workspace import Workspace


def load_tools(
    workspace: str | os.PathLike[str] | None = None,
    *,
    policy: str | os.PathLike[str] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Workspace, Plugins, ToolRegistry]:
    ws = Workspace.open(workspace, policy_path=policy, state_dir=state_dir)
    plugins = Plugins.load(allow=ws.policy.plugins.allow, block=ws.policy.plugins.block, env=env)
    registry = ToolRegistry()
    plugins.register_tools(registry)
    return ws, plugins, registry

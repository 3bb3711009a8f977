"""pydantic's own plugins do not run in CodeSpace's processes.

pydantic finds every installed distribution's ``pydantic`` entry points and hands each
plugin every validation it makes: in the server, every tool call's arguments and result
(file contents, commands, patches, what the policy hid from the listing of a directory).
That is code the policy's ``[plugins]`` table never admitted, running where the policy
is decided; so the server, the worker and ``codespace doctor`` turn pydantic's plugins
off before pydantic is first used (the plugin API has the same call for a plugin's own
process, as the runtime's worker: ``codespace.contract.keep_pydantic_plugins_out``). Finding them also costs each of those processes a
start's worth of work it does not need: ``importlib.metadata`` (email, zipfile, csv) and a
read of every distribution's entry points, 25-50 ms of a start without a kept tool listing
(benchmarks/README.md, "Server ready").

pydantic reads its plugins through one function of one private module
(``pydantic.plugin._loader.get_plugins``, called as each validator is made); the module
is put in place here, before pydantic imports it, as one that finds none.
``tests/test_pydantic_plugins.py`` fails when pydantic starts to use anything else from
that module, and shows a plugin pydantic alone would load is not loaded by the server.
"""

from __future__ import annotations

import sys
import types

LOADER = "pydantic.plugin._loader"


def _no_plugins() -> tuple[()]:
    return ()


def keep_pydantic_plugins_out() -> bool:
    """Make pydantic find no plugins in this process (False: too late, it has looked already)."""
    if LOADER in sys.modules:
        return sys.modules[LOADER].get_plugins is _no_plugins
    loader = types.ModuleType(LOADER, "pydantic's plugin loader as CodeSpace's processes have it: no plugins")
    loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[LOADER] = loader
    return True

"""``--baseline DIR`` for the file-search benchmarks: another copy of the plugin package (an
older commit's, say) imported under another name, to time before and after in the same
interleaved rounds."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

ALIAS = "baseline_file_search"


def import_copy(package_dir: str):  # noqa: ANN201 - a function returning the copy's submodules
    """``load(name)``: the submodule ``name`` of the package copy at ``package_dir``."""
    init = os.path.join(package_dir, "__init__.py")
    if not os.path.isfile(init):
        raise SystemExit(f"--baseline {package_dir}: not a package directory (no __init__.py)")
    spec = importlib.util.spec_from_file_location(ALIAS, init, submodule_search_locations=[package_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    def load(name: str) -> ModuleType:
        return importlib.import_module(f"{ALIAS}.{name}")

    return load

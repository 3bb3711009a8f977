"""The ``tools/list`` answer kept between starts, so a start answers it before importing.

Building the listing needs the App (pydantic, every plugin) and the SDK's models:
well over half a second, while an agent's client waits for ``tools/list`` before its
first model request. The answer the SDK produced is kept in the CodeSpace state
root (which the default policy hides from every workspace, so an agent cannot plant
a listing), keyed by everything that chose it: the interpreter and its import path, the
policy file's bytes and the CODESPACE_* environment (so a new workspace with the
same policy starts warm). A second copy is kept under the policy's ``[plugins]`` table
in place of its bytes: the listing depends on the policy only through which plugins
load (``tests/test_listing_keys.py`` varies every other section), so a start after
an edit elsewhere in the policy finds it too, at the cost of reading the policy with
tomllib (only when the first key finds nothing). Alongside it go the size
and modification time of every non-standard-library module the building process
had loaded, and of every site directory on ``sys.path`` (installing or removing a
plugin changes it): one changed file and the copy is not used. A process that finds one of them
changed since it started keeps no copy: what it loaded may be older than what it would stamp.

Once the App is built the served listing is checked against the registry's tool
names; a disagreement drops the copy (the next start rebuilds it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from .. import __version__

log = logging.getLogger(__name__)

FORMAT = 1
KEEP = 32  # listings kept (one per workspace and configuration); the oldest go first


def state_root() -> Path:
    """As codespace.workspace.default_state_root (restated: that module imports pydantic)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "codespace"


def _policy_bytes(workspace: str | None, policy: str | None) -> bytes:
    root = os.path.realpath(workspace or os.getcwd())
    policy_path = policy or os.path.join(root, ".codespace", "policy.toml")
    try:
        with open(policy_path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _key(policy_bytes: bytes, *, by_plugins: bool = False) -> str | None:
    """The listing's key: the policy by its bytes, or (``by_plugins``) by its ``[plugins]``
    table alone (None when the file is not TOML: only the App can say what is wrong with it).
    Not the workspace or the state directory: the listing does not depend on them (tested),
    and keying on them made every new workspace a cold start."""
    if by_plugins:
        import tomllib

        try:
            policy_part: object = {"plugins": tomllib.loads(policy_bytes.decode("utf-8")).get("plugins")}
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return None
    else:
        policy_part = {"policy_sha256": hashlib.sha256(policy_bytes).hexdigest()}
    parts = {
        "format": FORMAT, "version": __version__, "python": sys.executable, "path": sys.path,
        "policy": policy_part, "uid": os.geteuid(),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("CODESPACE_")),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


_LOADED_BY_NS = time.time_ns()  # before the App's modules are imported
"""A module stamped later than this may have been loaded before it changed."""


def _inputs() -> dict[str, list[int] | None]:
    """The files whose change could change the listing: loaded modules outside the
    standard library, and the import path's directories."""
    stdlib = os.path.dirname(os.__file__) + os.sep
    files: dict[str, list[int] | None] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and not (path.startswith(stdlib) and "site-packages" not in path):
            files[path] = _stamp(path)
    for entry in sys.path:
        if entry and _holds_distributions(entry):
            files[entry] = _stamp(entry)
    return files


def _holds_distributions(directory: str) -> bool:
    """A site directory (installing or removing a plugin changes it), not the current
    directory or a source tree that ``python -m`` put on the path, which change whenever
    a file is written there."""
    try:
        return any(name.endswith((".dist-info", ".egg-info", ".pth")) for name in os.listdir(directory))
    except OSError:
        return False


class ListingCache:
    def __init__(self, workspace: str | None, policy: str | None) -> None:
        self._policy = _policy_bytes(workspace, policy)
        self.path = self._path(_key(self._policy))

    @staticmethod
    def _path(key: str) -> Path:
        return state_root() / "listings" / f"{key}.json"

    @cached_property
    def by_plugins(self) -> Path | None:
        """Where the copy keyed by the policy's ``[plugins]`` table lives (None: not TOML)."""
        key = _key(self._policy, by_plugins=True)
        return None if key is None else self._path(key)

    def load(self) -> tuple[bytes, list[str]] | None:
        """The cached ``result`` bytes of a plain ``tools/list`` and the tool names, if still valid:
        the copy for these policy bytes, else the one for the same ``[plugins]`` table."""
        found = self._load(self.path)
        if found is None:
            other = self.by_plugins
            found = self._load(other) if other is not None else None
            if found is not None:
                log.info("tool listing cache: the policy changed, not which plugins load; kept listing used")
        return found

    @staticmethod
    def _load(path: Path) -> tuple[bytes, list[str]] | None:
        try:
            with open(path, "rb") as f:
                saved = json.loads(f.read())
            if saved.get("format") != FORMAT:
                return None
            for source, stamp in saved["inputs"].items():
                if _stamp(source) != stamp:
                    log.info("tool listing cache: %s changed; rebuilding the listing", source)
                    return None
            return saved["result"].encode("utf-8"), list(saved["names"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save(self, result: bytes) -> None:
        """Keep the SDK's answer (called once it has been written to the client)."""
        try:
            names = sorted(tool["name"] for tool in json.loads(result)["tools"])
            inputs = _inputs()
            changed = [path for path, stamp in inputs.items()
                       if stamp is not None and stamp[0] > _LOADED_BY_NS]
            if changed:
                # Stamped now, this listing would pass for the new code's (found by testing from
                # outside: a module edited while a server ran, and every later start served its
                # old listing). The next start, which loads the new code, keeps one.
                log.info("tool listing cache not written: %s changed since this server started", changed[0])
                return
            record = {"format": FORMAT, "result": result.decode("utf-8"), "names": names, "inputs": inputs}
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            for path in filter(None, {self.path, self.by_plugins}):
                tmp = path.with_name(f".{path.name}.{os.getpid()}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(fd, "w") as f:
                    json.dump(record, f)
                os.replace(tmp, path)
            self._prune()
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            log.info("tool listing cache not written (%s): the next start builds the listing again", exc)

    def _prune(self) -> None:
        entries = sorted(self.path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)

    def check(self, served_names: list[str], registry_names: list[str]) -> None:
        if sorted(served_names) != sorted(registry_names):
            log.warning("the cached tool listing named %s, the registry has %s: cache dropped",
                        sorted(served_names), sorted(registry_names))
            self.drop()

    def drop(self) -> None:
        for path in filter(None, {self.path, self.by_plugins}):
            try:
                os.unlink(path)
            except OSError:
                pass


def listed_names(result: bytes) -> list[str]:
    data: Any = json.loads(result)
    return [tool["name"] for tool in data["tools"]]


def build_result(registry: Any, version: str) -> bytes:
    """The ``result`` of a plain ``tools/list`` on a connection of ``version`` (a classic era),
    as the SDK's server writes it, without the server half of the SDK, whose imports (starlette,
    uvicorn, the dispatcher) are most of a first start (benchmarks/README.md, "Server ready"),
    and without its protocol models where :mod:`.tool_wire` can write the same bytes.
    tests/test_stdio_front.py and tests/test_tool_wire.py compare the bytes with the SDK's."""
    from .tool_wire import listing_result

    result = listing_result(list(registry), version)
    return result if result is not None else sdk_result(registry, version)


def sdk_result(registry: Any, version: str) -> bytes:
    """The same through the SDK's protocol models, their dump and their per-version sieve."""
    import mcp_types as types
    from mcp_types import methods
    from pydantic_core import to_json

    dumped = types.ListToolsResult(tools=registry.mcp_tools()).model_dump(by_alias=True, mode="json",
                                                                            exclude_none=True)
    return to_json(methods.serialize_server_result("tools/list", version, dumped))

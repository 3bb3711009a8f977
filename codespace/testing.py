"""Test support for CodeSpace and its plugins: real in-process MCP sessions, and the pytest
fixtures around them.

Installing ``codespace`` registers this module as a pytest plugin (entry point ``pytest11``:
``codespace``), so any test suite in the environment has the fixtures without importing them.
Where plugin autoloading is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), load it with
``-p codespace.testing`` (and ``-p anyio`` for async tests) or ``pytest_plugins =
["codespace.testing"]`` in the root conftest.py.

A plugin's conftest.py says which plugins load and where its test plugins live; the rest is
shared (README "Testing a plugin")::

    @pytest.fixture
    def enabled_plugins():
        return ("hello",)

    @pytest.mark.anyio
    async def test_hello(mcp_client):
        async with mcp_client() as client:
            assert (await call_ok(client, "hello", {"name": "you"}))["greeting"] == "hello you"

Without pytest, the plain helpers work on their own::

    async with connect(tmp / "ws", state_dir=tmp / "state", mode="legacy") as client:
        result = await call_ok(client, "read_file", {"path": "a.txt"})
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client

from .app import App
from .outcome import ERROR_META_KEY
from .server import build_server
from .workspace import Workspace

MODES = ("auto", "legacy")
WORKER_ENV = "CODESPACE_TEST_WORKER"
"""Set to ``child`` (or ``daemon``) to run every App ``build_app`` makes with that ``[runtime]
worker`` (added to its policy, the runtime plugin added to its plugins): the same suites then
check that the worker gives what the server gives in-process."""
APPS_RECORD_ENV = "CODESPACE_TEST_APPS_RECORD"
"""A file: each test that calls ``build_app`` (in this process) is added to it, a line each."""
APPS_ONLY_ENV = "CODESPACE_TEST_APPS_ONLY"
"""A file ``$CODESPACE_TEST_APPS_RECORD`` wrote: only the tests it lists run. ``$CODESPACE_TEST_WORKER``
changes nothing but the Apps ``build_app`` makes, so a worker run of the tests that made none
would repeat the first run's code exactly; CI's worker pass runs only the others."""

_policy_numbers = itertools.count(1)
_apps_built = 0  # build_app's calls so far: the pytest plugin below reads it around each test


def write_policy_file(directory: str | os.PathLike[str], text: str, name: str | None = None) -> Path:
    """``text`` (policy TOML) as a file in ``directory``: ``name``, or a name no other call of
    this process gives, so several policies can sit beside one workspace."""
    path = Path(directory) / (name or f"policy-{os.getpid()}-{next(_policy_numbers)}.toml")
    path.write_text(text)
    return path


def open_workspace(
    root: str | os.PathLike[str], *, state_dir: str | os.PathLike[str], policy: str | None = None,
) -> Workspace:
    """The Workspace plugin hooks receive, on ``root``; ``policy`` is TOML text, written beside
    the state directory."""
    policy_path = None if policy is None else write_policy_file(Path(state_dir).parent, policy)
    return Workspace.open(root, policy_path=policy_path, state_dir=state_dir)


def build_app(
    workspace: str | os.PathLike[str],
    *,
    state_dir: str | os.PathLike[str],
    policy: str | None = None,
    plugins: tuple[str, ...] | None = None,
) -> App:
    """An App on ``workspace``; ``policy`` is TOML text (written beside the state directory);
    ``plugins`` limits which entry points load (None: all installed). ``$CODESPACE_TEST_WORKER``
    adds a ``[runtime] worker`` to the policy (unless it has a ``[runtime]`` section)."""
    global _apps_built
    _apps_built += 1
    worker = os.environ.get(WORKER_ENV)
    if worker and (policy is None or "[runtime]" not in policy):
        policy = (policy or "") + f'\n[runtime]\nworker = "{worker}"\n'
        plugins = None if plugins is None else (*plugins, "runtime")
        if plugins is not None and "[plugins]" not in policy:
            # In the policy, not only in this App's environment: the worker loads what it says.
            policy += "\n[plugins]\nallow = [" + ", ".join(json.dumps(p) for p in plugins) + "]\n"
    policy_path = None if policy is None else write_policy_file(Path(state_dir).parent, policy)
    env = dict(os.environ)
    env.pop("CODESPACE_PLUGINS_BLOCK", None)
    if plugins is not None:
        env["CODESPACE_PLUGINS_ALLOW"] = ",".join(plugins) or "(none)"
    return App.build(workspace, policy=policy_path, state_dir=state_dir, env=env)


@asynccontextmanager
async def connect(app_or_workspace: App | str | os.PathLike[str], *, mode: str = "auto", **kwargs: Any) -> AsyncIterator[Client]:
    """An MCP client session with the server of ``app_or_workspace`` (an App, or a workspace
    directory with ``build_app``'s keywords), in client ``mode`` "auto" or "legacy"."""
    app = app_or_workspace if isinstance(app_or_workspace, App) else build_app(app_or_workspace, **kwargs)
    async with Client(build_server(app), mode=mode) as client:
        yield client


def structured(result: Any) -> dict[str, Any]:
    """A success's structured content; for an error, ``{"error": ...}`` from its ``_meta``
    (error results carry no structured content: see codespace.outcome.Outcome)."""
    if result.is_error:
        assert result.structured_content is None, "an error result must not carry structuredContent"
        return {"error": (result.meta or {})[ERROR_META_KEY]}
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def call_ok(client: Client, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The structured result of a call that must succeed."""
    result = await client.call_tool(name, dict(arguments or {}))
    assert not result.is_error, f"{name} failed: {result.content[0].text}"
    return structured(result)


async def call_error(client: Client, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The error object of a failing call (asserts that it failed, carries no structured
    content, and shows the agent the error's message as its text)."""
    result = await client.call_tool(name, dict(arguments or {}))
    assert result.is_error, f"{name} unexpectedly succeeded: {result.content[0].text[:500]}"
    data = structured(result)
    assert data["error"]["message"] == result.content[0].text
    return data["error"]


def server_pids(state_dir: str | os.PathLike[str]) -> list[int]:
    """Processes running ``codespace serve`` on ``state_dir`` (to kill one mid-operation)."""
    wanted = os.fsencode(str(state_dir))
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and wanted in cmdline:
            pids.append(int(entry))
    return pids


# The fixtures. Overriding one in a conftest.py (same name) changes it for that directory's
# tests, as with any pytest fixture: that is how a suite picks its plugins and its directories.
try:
    import pytest
except ImportError:  # pragma: no cover - the helpers above work without pytest
    pytest = None

if pytest is not None:

    def pytest_configure(config: Any) -> None:
        config.addinivalue_line(
            "markers", "in_process: the test inspects this process's own objects, threads or test-only plugins "
            f"(which a worker process cannot load); skipped when ${WORKER_ENV} runs the suite with a worker")

    def _test_key(item: Any) -> str:
        """A test's name in the record: its file's absolute path, then its id within the file
        (the same whichever directory pytest runs from)."""
        return f"{item.path}::{item.nodeid.partition('::')[2]}"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
        record = os.environ.get(APPS_RECORD_ENV)
        before = _apps_built
        try:
            return (yield)
        finally:
            if record and _apps_built != before:
                with open(record, "a", encoding="utf-8") as f:
                    f.write(_test_key(item) + "\n")

    def _only_recorded(config: Any, items: list, record: str) -> None:
        try:
            with open(record, encoding="utf-8") as f:
                wanted = set(f.read().splitlines())
        except OSError as exc:
            raise pytest.UsageError(f"${APPS_ONLY_ENV}: cannot read {record}: {exc.strerror}") from None
        keys = {_test_key(item): item for item in items}
        files = {str(item.path) for item in items}
        # A recorded test of a collected file that is not collected now has an id that changes
        # from run to run: deselecting it silently would drop it from the pass.
        lost = sorted(key for key in wanted if key.partition("::")[0] in files and key not in keys)
        if lost:
            raise pytest.UsageError(f"${APPS_ONLY_ENV}: {len(lost)} recorded tests were not collected "
                                    f"(do their ids change between runs?): {', '.join(lost[:5])}")
        config.hook.pytest_deselected(items=[item for key, item in keys.items() if key not in wanted])
        items[:] = [item for key, item in keys.items() if key in wanted]

    @pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: what they leave out is not lost
    def pytest_collection_modifyitems(config: Any, items: list) -> None:
        only = os.environ.get(APPS_ONLY_ENV)
        if only:
            _only_recorded(config, items, only)
        if not os.environ.get(WORKER_ENV):
            return
        skip = pytest.mark.skip(reason=f"in_process: not meaningful with ${WORKER_ENV} (the worker does the work)")
        for item in items:
            if item.get_closest_marker("in_process") is not None:
                item.add_marker(skip)

    @pytest.fixture
    def anyio_backend() -> str:
        """Run ``@pytest.mark.anyio`` tests on asyncio."""
        return "asyncio"

    @pytest.fixture(params=MODES)
    def mode(request: pytest.FixtureRequest) -> str:
        """Each in-process MCP test once per client mode ("auto", "legacy")."""
        return request.param

    @pytest.fixture
    def workspace_parent(tmp_path: Path) -> Path:
        """Where ``ws``, ``state`` and ``write_policy``'s files go: ``tmp_path``. Override it to
        move them (the sandbox tests do: a sandbox gives commands a private /tmp)."""
        return tmp_path

    @pytest.fixture
    def ws(workspace_parent: Path) -> Path:
        """An empty workspace directory (real path: no symlinked temp dirs in assertions)."""
        path = workspace_parent / "ws"
        path.mkdir()
        return Path(os.path.realpath(path))

    @pytest.fixture
    def state(workspace_parent: Path) -> Path:
        """The state directory, beside the workspace (not yet created)."""
        return workspace_parent / "state"

    @pytest.fixture
    def write_policy(workspace_parent: Path) -> Callable[[str], Path]:
        """``write_policy(toml_text)``: a policy file beside the workspace, a new one per call."""
        return lambda text: write_policy_file(workspace_parent, text)

    @pytest.fixture
    def plugin_paths() -> tuple[Path, ...]:
        """Directories holding test plugins (a package and its ``.dist-info`` with the entry
        point) to find besides the installed ones: none. Override it to add yours."""
        return ()

    @pytest.fixture
    def discoverable_plugins(plugin_paths: tuple[Path, ...], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ...]:
        """``plugin_paths`` put on ``sys.path`` for the test, so their entry points are found.
        ``make_app`` requests it; so does a test that loads plugins another way."""
        for path in reversed(plugin_paths):
            monkeypatch.syspath_prepend(str(path))
        return plugin_paths

    @pytest.fixture
    def enabled_plugins() -> tuple[str, ...] | None:
        """The plugins (entry point names) ``make_app`` loads: None, every one installed.
        Override it in a plugin's conftest.py so that its tests do not depend on what else is
        installed, e.g. ``return ("hello",)``."""
        return None

    @pytest.fixture
    def make_workspace(ws: Path, state: Path) -> Callable[..., Workspace]:
        """``make_workspace(policy=None)``: the Workspace plugin hooks receive, on ``ws`` and
        ``state`` with ``policy`` (TOML text), for testing a backend without the gateway."""
        return lambda policy=None: open_workspace(ws, state_dir=state, policy=policy)

    @pytest.fixture
    def workspace(make_workspace: Callable[..., Workspace]) -> Workspace:
        """The Workspace on ``ws`` and ``state`` with the default policy."""
        return make_workspace()

    @pytest.fixture
    def make_app(
        ws: Path, state: Path, enabled_plugins: tuple[str, ...] | None, discoverable_plugins: tuple[Path, ...],
    ) -> Callable[..., App]:
        """``make_app(policy=None, plugins=enabled_plugins)``: an App on ``ws`` and ``state``
        with ``policy`` (TOML text), loading ``plugins``."""

        def make(policy: str | None = None, plugins: tuple[str, ...] | None = enabled_plugins) -> App:
            return build_app(ws, state_dir=state, policy=policy, plugins=plugins)

        return make

    @pytest.fixture
    def mcp_client(make_app: Callable[..., App]) -> Callable[..., AbstractAsyncContextManager[Client]]:
        """``async with mcp_client(app=None, mode="auto", **make_app_keywords) as client``: a real
        MCP session, in process, with ``app`` or one ``make_app`` builds."""

        def open_client(app: App | None = None, *, mode: str = "auto", **kwargs: Any) -> AbstractAsyncContextManager[Client]:
            return connect(app if app is not None else make_app(**kwargs), mode=mode)

        return open_client

"""The ``codespace`` command line.

Only ``serve`` imports the MCP stack; the other commands stay quick. Output for
humans goes to stdout here (this is the CLI, not the protocol channel); ``serve``
logs to stderr only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import __version__

# As codespace.store.Status (restated: the store module imports pydantic; a test checks they agree).
STATUSES = ("running", "succeeded", "failed", "refused", "interrupted", "cancelled")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=getattr(logging, level.upper(), logging.WARNING),
        format="%(asctime)s codespace %(levelname)s %(name)s: %(message)s",
    )


def _workspace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", "-w", default=None, help="workspace directory (default: the current directory)")
    p.add_argument("--policy", default=None, help="policy TOML (default: <workspace>/.codespace/policy.toml if present)")
    p.add_argument("--state-dir", default=None, help="state directory (default: $XDG_STATE_HOME/codespace/workspaces/...)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codespace", description="A governed workspace for coding agents over MCP.")
    parser.add_argument("--version", action="version", version=f"codespace {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("CODESPACE_LOG", "warning"))
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve a workspace over MCP (stdio by default)")
    _workspace_options(serve)
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP: loopback address to bind")
    serve.add_argument("--port", type=int, default=8765, help="HTTP: port (0 picks a free one)")
    serve.add_argument("--token-file", default=None, help="HTTP: file holding the bearer token")

    for name, help_text in (("plugins", "list plugins: version, upstream pin, hooks, errors"),
                            ("pins", "do all plugins follow the same upstream release?"),
                            ("doctor", "check the host: Python, plugins, state dir, Landlock, seccomp, userns, bwrap")):
        p = sub.add_parser(name, help=help_text)
        _workspace_options(p)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "pins":
            _pins_check_parser(p)

    prepare = sub.add_parser("prepare", help="make the next start answer tools/list at once (after an install, "
                                          "a plugin change or an edit of the policy's [plugins])")
    _workspace_options(prepare)
    sub.add_parser("worker", help="the hardened worker (codespace-runtime): start, stop, status, serve",
                   add_help=False, prefix_chars="\0").add_argument("worker_args", nargs=argparse.REMAINDER)

    ops = sub.add_parser("ops", help="inspect the operation store")
    ops_sub = ops.add_subparsers(dest="ops_command", required=True)
    ops_list = ops_sub.add_parser("list", help="recent operations, newest first")
    _workspace_options(ops_list)
    ops_list.add_argument("--limit", type=int, default=20)
    ops_list.add_argument("--status", default=None, choices=STATUSES,
                          help="only operations with this status")
    ops_list.add_argument("--tool", default=None)
    ops_list.add_argument("--json", action="store_true")
    ops_show = ops_sub.add_parser("show", help="one operation in full")
    _workspace_options(ops_show)
    ops_show.add_argument("operation_id")
    ops_net = ops_sub.add_parser("net", help="egress-proxy decisions (allow/deny, reason, host, port, method)")
    _workspace_options(ops_net)
    ops_net.add_argument("--operation", default=None, help="only this operation's connections")
    ops_net.add_argument("--limit", type=int, default=50)
    ops_net.add_argument("--json", action="store_true")
    return parser


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _pins_check_parser(pins: argparse.ArgumentParser) -> None:
    check = pins.add_subparsers(dest="pins_command").add_parser(
        "check", help="run each plugin's conformance check against an upstream release's own codex binary")
    check.add_argument("--release", default=None, help="upstream tag rust-vX.Y.Z (default: the plugins' pin)")
    check.add_argument("--plugin", action="append", default=[], metavar="NAME",
                       help="only this plugin (entry-point or distribution name); repeat for more")
    check.add_argument("--ci", action="store_true", help="bounded run: fixed seed, case count within CI's budget")
    check.add_argument("--seed", type=int, default=None, help="seed of generated cases (default: each check's)")
    check.add_argument("--cases", type=_count, default=None, help="generated cases per check (default: each check's)")
    check.add_argument("--json", action="store_true", help="machine-readable output")


def _build_app(args: argparse.Namespace):  # noqa: ANN202
    from .app import App

    return App.build(args.workspace, policy=args.policy, state_dir=args.state_dir)


# -- serve ---------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    if args.transport == "stdio":
        # Nothing heavy is imported before the wire is served: see codespace.transports.stdio_serve.
        from .transports.stdio_serve import serve_stdio

        return serve_stdio(args.workspace, args.policy, args.state_dir)
    from .transports.http import serve_http

    return serve_http(args.workspace, args.policy, args.state_dir, host=args.host, port=args.port,
                      token_file=args.token_file)


# -- plugins / pins / doctor ------------------------------------------------------


def _plugins(args: argparse.Namespace) -> int:
    app = _build_app(args)
    infos = app.plugins.listing()
    if args.json:
        print(json.dumps([i.as_dict() for i in infos], indent=2))
    else:
        if not infos:
            print("no plugins installed (entry-point group codespace.plugins)")
        for info in infos:
            print(f"{info.name}: {info.status}  {info.distribution or '?'} {info.version or ''}".rstrip())
            print(f"    pin:   {info.pin or 'none declared'}")
            print(f"    hooks: {', '.join(info.hooks) or '-'}")
            if info.error:
                print(f"    error: {info.error}")
    return 1 if any(i.status == "failed" or i.error for i in infos) else 0


def _pins(args: argparse.Namespace) -> int:
    if getattr(args, "pins_command", None) == "check":
        from . import pin_checks
        from .plugins import Plugins

        return pin_checks.main(Plugins.load(), args)
    app = _build_app(args)
    infos = [i for i in app.plugins.listing() if i.status != "blocked"]
    releases = {(i.pin.project, i.pin.release) for i in infos if i.pin}
    unpinned = [i.name for i in infos if i.pin is None]
    same = len(releases) <= 1 and not unpinned
    if args.json:
        print(json.dumps({
            "same_release": same,
            "releases": sorted(f"{p} {r}" for p, r in releases),
            "plugins": {i.name: str(i.pin) if i.pin else None for i in infos},
            "unpinned": unpinned,
        }, indent=2))
    else:
        for info in infos:
            print(f"{info.name}: {info.pin or 'no upstream pin declared'}")
        if not infos:
            print("no plugins installed")
        elif same:
            project, release = next(iter(releases))
            print(f"OK: all plugins follow {project} {release}")
        else:
            print("DIFFERENT: plugins follow " + ", ".join(sorted(f"{p} {r}" for p, r in releases))
                  + (f"; without a pin: {', '.join(unpinned)}" if unpinned else ""))
    return 0 if same else 1


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import run_checks

    app = _build_app(args)
    checks = run_checks(app)
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for check in checks:
            print(f"[{'OK' if check.ok else 'PROBLEM'}] {check.name}: {check.detail}")
            if not check.ok and check.hint:
                print(f"        hint: {check.hint}")
    return 0 if all(c.ok for c in checks) else 1


# -- ops -------------------------------------------------------------------------


def _open_store(args: argparse.Namespace):  # noqa: ANN202
    from .app import STORE_FILE
    from .store import SQLiteStore
    from .workspace import Workspace

    ws = Workspace.open(args.workspace, policy_path=args.policy, state_dir=args.state_dir)
    return SQLiteStore(ws.state_dir / STORE_FILE).open_sync()


def _status(record: Any) -> str:
    from .store import owner_alive

    if record.status == "running" and not owner_alive(record.owner):
        return "running (its server is gone; marked interrupted at the next start)"
    return record.status


def _ops(args: argparse.Namespace) -> int:
    store = _open_store(args)
    try:
        if args.ops_command == "list":
            records = store.list_sync(args.limit, args.status, args.tool, None)
            if args.json:
                print(json.dumps([r.model_dump() for r in records], indent=2))
                return 0
            for r in records:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at))
                extra = f"  rule={r.rule}" if r.rule else ""
                print(f"{when}  {r.operation_id}  {r.tool:<16} {_status(r)}{extra}")
            return 0
        if args.ops_command == "net":
            events = store.network_sync(limit=args.limit, operation_id=args.operation)
            if args.json:
                print(json.dumps([e.model_dump() for e in events], indent=2))
                return 0
            for e in events:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at))
                print(f"{when}  {e.decision:<5} {e.reason:<16} {e.protocol:<7} {e.method or '-':<7} "
                      f"{e.host}:{e.port}  {e.operation_id or '-'}")
            return 0
        record = store.get_sync(args.operation_id)
        if record is None:
            print(f"no operation {args.operation_id!r}", file=sys.stderr)
            return 1
        shown = record.model_dump()
        shown["status"] = _status(record)
        shown["network"] = [e.model_dump() for e in store.network_sync(limit=50, operation_id=record.operation_id)]
        print(json.dumps(shown, indent=2))
        return 0
    finally:
        store.close_sync()


def _prepare(args: argparse.Namespace) -> int:
    from .prepare import prepare

    return prepare(args.workspace, args.policy, args.state_dir)


def _worker(args: argparse.Namespace) -> int:
    """``codespace worker ...`` is the runtime plugin's ``codespace-worker ...``."""
    from importlib.metadata import entry_points

    found = entry_points(group="console_scripts", name="codespace-worker")
    if not found:
        print("codespace worker: no plugin provides the hardened worker; install codespace-runtime "
              "(pip install ./plugins/runtime from the CodeSpace repository)", file=sys.stderr)
        return 2
    sys.argv[0] = "codespace worker"
    return next(iter(found)).load()(args.worker_args)


def _unwrap(exc: BaseException) -> BaseException:
    """The one real error inside task groups' exception groups (serve runs in task groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    from .pydantic_plugins import keep_pydantic_plugins_out

    keep_pydantic_plugins_out()  # before anything imports pydantic: see that module
    args = _parser().parse_args(argv)
    _setup_logging(args.log_level)
    handlers = {"serve": _serve, "plugins": _plugins, "pins": _pins, "doctor": _doctor, "ops": _ops,
                "prepare": _prepare, "worker": _worker}
    try:
        code = handlers[args.command](args)
        if args.command != "serve":
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BaseException as raised:  # noqa: BLE001 - sorted below; anything else is re-raised
        exc = _unwrap(raised)
        from .store import StoreError
        from .workspace import WorkspaceError

        if isinstance(exc, (WorkspaceError, StoreError)):
            print(f"codespace: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, BrokenPipeError) and args.command != "serve":
            # The reader left (``codespace ops list | head``): stop quietly, as ls or git do.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 141
        if isinstance(exc, OSError) and args.command == "serve":
            print(f"codespace: cannot serve: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, KeyboardInterrupt):
            return 130
        if exc is raised:
            raise
        raise exc from raised


if __name__ == "__main__":
    sys.exit(main())

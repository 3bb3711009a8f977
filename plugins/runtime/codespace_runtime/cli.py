"""``codespace-worker``: serve (one worker process) and start|stop|status (daemon mode).

Exit status: 0 done (``status``: running), 1 the action failed, 2 bad usage or a refused
start-up (token file, socket placement, workspace), 3 ``status``: not running.
"""

from __future__ import annotations

import argparse
import os
import json
import sys

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codespace-worker",
                                     description="CodeSpace's hardened worker (protocol 5 over a Unix socket).")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run one worker in the foreground")
    serve.add_argument("--workspace", required=True, help="the workspace directory")
    channel = serve.add_mutually_exclusive_group(required=True)
    channel.add_argument("--fd", type=int, help="child mode: the worker's end of a socket pair")
    channel.add_argument("--socket", help="path mode: listen on this socket (its directory must be 0700 and ours)")
    serve.add_argument("--token-file", required=True, help="0600 file holding the token hello proves")
    serve.add_argument("--allow-uid", type=int, action="append", default=[], dest="allow_uids",
                       help="a uid that may connect (repeatable; default: the worker's own)")
    serve.add_argument("--no-runner", action="store_true",
                       help="serve only the built-in methods (ping, status, cancel, shutdown): protocol checks")
    serve.add_argument("--parent-pid", type=int, help="child mode: stop when this process dies (default: the parent)")
    for name, text in (("start", "start the workspace's daemon worker"), ("stop", "stop it"),
                       ("status", "is it running, and which versions")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--workspace", default=".", help="the workspace directory (default: .)")
        command.add_argument("--token-file", help="the token file (default: <state dir>/worker/token)")
        if name == "start":
            command.add_argument("--allow-uid", type=int, action="append", default=[], dest="allow_uids",
                                 help="a uid that may connect (repeatable; default: the worker's own)")
            command.add_argument("--no-runner", action="store_true", help="serve only the built-in methods")
            command.add_argument("--foreground", action="store_true",
                                 help="become the worker instead of starting it in the background (systemd)")
            command.add_argument("--umask", type=_octal_umask,
                                 help="octal umask for the files the agent creates (default: this process's, "
                                      "e.g. 022 makes them 0644)")
        if name == "status":
            command.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _octal_umask(text: str) -> str:
    try:
        value = int(text, 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal umask (e.g. 022 or 077)")
    return f"{value:04o}"


def main(argv: list[str] | None = None) -> int:
    from codespace.contract import keep_pydantic_plugins_out

    keep_pydantic_plugins_out()  # the worker validates the same arguments and results as the server
    args = _parser().parse_args(argv)
    if args.command == "serve":
        from .worker import ServeArgs, serve

        return serve(ServeArgs(workspace=args.workspace, token_file=args.token_file, fd=args.fd, socket=args.socket,
                               allow_uids=args.allow_uids, parent_pid=args.parent_pid,
                               runner=not args.no_runner))
    return _daemon_command(args)


def _daemon_command(args: argparse.Namespace) -> int:
    from codespace.contract import gate

    from . import daemon, sockets, tokens
    from .client import WorkerError

    try:
        # A server of another uid (--allow-uid) must reach the socket: the directory is made 0711.
        shared = any(uid != os.geteuid() for uid in args.allow_uids) if args.command == "start" else None
        where = daemon.placement(args.workspace, args.token_file, shared=shared)
        if args.command == "status":
            return _print_status(daemon.status(where), args.json)
        if args.command == "start":
            pid = daemon.start(where, args.allow_uids, runner=not args.no_runner, foreground=args.foreground,
                               umask=args.umask)
            print(f"worker started: pid {pid}, socket {where.socket}")
            return 0
        print(daemon.stop(where))
        return 0
    except sockets.AlreadyServing as exc:
        sys.stderr.write(f"codespace-worker: {exc}\n")
        return EXIT_FAILED
    except (sockets.PlacementError, tokens.TokenError, gate.WorkspaceError) as exc:
        sys.stderr.write(f"codespace-worker: {exc}\n")
        return EXIT_USAGE
    except (OSError, WorkerError) as exc:
        sys.stderr.write(f"codespace-worker: {args.command} failed: {exc}\n")
        return EXIT_FAILED


def _print_status(report: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report, sort_keys=True))
    elif report["running"]:
        print(f"running: pid {report['pid']}, protocol {'/'.join(map(str, report['protocols']))}, "
              f"worker {report['worker']}, socket {report['socket']}")
    else:
        print(f"not running (socket {report['socket']}{'; ' + report['problem'] if 'problem' in report else ''})")
    return 0 if report["running"] else EXIT_NOT_RUNNING


if __name__ == "__main__":
    sys.exit(main())

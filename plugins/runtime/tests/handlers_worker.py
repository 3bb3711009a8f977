"""A worker process with handlers made for the service tests (run: python handlers_worker.py FD TOKEN).

Real process, real socket pair; only the handlers are the tests' own, so every answer path of
the service (results, descriptors, errors, cancellation, notifications) can be reached."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from codespace_runtime import protocol as p
from codespace_runtime.service import BadParams, current_connection, serve_connection

cancelled: list[int] = []


async def echo(params: dict, fds: list[int]) -> dict:
    return {"params": params, "fds": len(fds)}


async def sleep(params: dict, fds: list[int]) -> dict:
    try:
        await asyncio.sleep(params["seconds"])
    except asyncio.CancelledError:
        cancelled.append(params.get("tag", 0))
        raise
    return {"slept": params["seconds"]}


async def boom(params: dict, fds: list[int]) -> dict:
    raise ValueError("the handler broke on purpose")


async def strict(params: dict, fds: list[int]) -> dict:
    raise BadParams("'path' is required")


async def mapped(params: dict, fds: list[int]) -> dict:
    raise KeyError("mapped")


async def read_fd(params: dict, fds: list[int]) -> dict:
    data = b"".join(os.read(fd, 1024) for fd in fds)
    for fd in fds:
        os.close(fd)
    return {"data": data.decode()}


async def give_pipe(params: dict, fds: list[int]) -> tuple[dict, list[int]]:
    r, w = os.pipe()
    os.write(w, params["text"].encode())
    os.close(w)
    return {"given": 1}, [r]


async def notify(params: dict, fds: list[int]) -> dict:
    await current_connection().notify("test.event", {"n": params["n"]})
    return {"notified": True}


async def not_a_dict(params: dict, fds: list[int]):
    return ["a", "list"]


async def unsendable(params: dict, fds: list[int]) -> dict:
    return {"text": "\ud800"}


def open_fds() -> dict:
    return {"open_fds": len(os.listdir("/proc/self/fd")), "cancelled": cancelled}


def errors(exc: BaseException) -> p.Error | None:
    if isinstance(exc, KeyError):
        return p.Error(code="mapped", message=f"mapped: {exc}", dispatched=False, data={"key": str(exc)})
    return None


HANDLERS = {f.__name__.replace("_", "."): f for f in
            (echo, sleep, boom, strict, mapped, read_fd, give_pipe, notify, not_a_dict, unsendable)}


def main() -> None:
    fd, token_file = int(sys.argv[1]), sys.argv[2]
    token = open(token_file, "rb").read().strip()
    sock = socket.socket(fileno=fd)
    asyncio.run(serve_connection(sock, token, HANDLERS, open_fds, errors=errors, workspace="/test"))


if __name__ == "__main__":
    main()

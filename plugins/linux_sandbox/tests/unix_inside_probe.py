"""Run inside the sandbox (network off): sockets that stay inside work, host sockets stay out of
reach. argv[1]: JSON with "dir" (a directory in the workspace; "{ws}" stands for the workspace)
and "targets" (label -> [address, kind] of host sockets; "@name" is abstract). For each host
socket: a link to it inside the workspace, a rename race swapping a workspace socket for such a
link, an abstract connect, a datagram socketpair's sendmsg to it. Prints JSON: check -> result."""

import ctypes
import json
import os
import socket
import socketserver
import sys
import threading

args = json.loads(sys.argv[1].replace("{ws}", os.getcwd()))
os.makedirs(args["dir"], exist_ok=True)
out = {}


def attempt(name, fn):
    try:
        result = fn()
        out[name] = "ok" if result is None else result
    except OSError as exc:
        out[name] = f"errno {exc.errno}"


def dgram_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.send(b"one")
    a.send(b"two")
    got = [b.recv(16), b.recv(16)]
    b.sendall(b"back")
    return "ok" if got == [b"one", b"two"] and a.recv(16) == b"back" else f"got {got}"


def dgram_pair_flags():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    try:
        b.recv(4)
    except BlockingIOError:
        pass
    else:
        return "recv did not block-fail"
    return "ok" if not os.get_inheritable(a.fileno()) else "inheritable"


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(self.request.recv(64).upper())


def socketserver_pair():
    path = os.path.join(args["dir"], "srv.sock")
    server = socketserver.UnixStreamServer(path, Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
            client.sendall(b"hello")
            reply = client.recv(64)
        os.chdir(args["dir"])
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect("srv.sock")  # relative to the working directory
            client.sendall(b"again")
            reply2 = client.recv(64)
    finally:
        server.shutdown()
        server.server_close()
        os.unlink(path)
    return "ok" if (reply, reply2) == (b"HELLO", b"AGAIN") else f"got {reply!r} {reply2!r}"


def seqpacket_pair():
    path = os.path.join(args["dir"], "seq.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(1)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    cli.connect(path)
    conn, _ = srv.accept()
    cli.send(b"x")
    ok = conn.recv(4) == b"x"
    for s in (srv, cli, conn):
        s.close()
    os.unlink(path)
    return "ok" if ok else "lost"


def abstract_listen():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0codespace-probe-" + str(os.getpid()))
    s.listen(1)


def native(address):
    return "\0" + address[1:] if address.startswith("@") else address


def stream_kind(kind):
    return socket.SOCK_SEQPACKET if kind == "seqpacket" else socket.SOCK_STREAM


def through_link(label, address, kind):
    link = os.path.join(args["dir"], f"{label}.link")
    os.symlink(address, link)
    with socket.socket(socket.AF_UNIX, stream_kind(kind)) as s:
        s.connect(link)
        s.sendall(f"{label} through a link".encode())


def race(label, address, kind, rounds=300):
    """A workspace socket and a link to the host socket take turns under one name."""
    real = os.path.join(args["dir"], f"{label}.real")
    name = os.path.join(args["dir"], f"{label}.race")
    server = socket.socket(socket.AF_UNIX, stream_kind(kind))
    server.bind(real)
    server.listen(rounds)
    os.link(real, name)
    stop = []

    def swap():
        n = 0
        while not stop:
            n += 1
            for make in (lambda tmp: os.symlink(address, tmp), lambda tmp: os.link(real, tmp)):
                tmp = f"{name}.{n}.tmp"
                make(tmp)
                os.replace(tmp, name)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    inside = refused = 0
    for _ in range(rounds):
        with socket.socket(socket.AF_UNIX, stream_kind(kind)) as s:
            try:
                s.connect(name)
                inside += 1
            except OSError:
                refused += 1
    stop.append(True)
    thread.join()
    accepted = 0
    server.setblocking(False)
    while True:
        try:
            server.accept()[0].close()
            accepted += 1
        except BlockingIOError:
            break
    return f"connected {inside} accepted inside {accepted} refused {refused}"


def userns_bind(label, address, kind):
    """In a user namespace of the command's own (all capabilities there): the host socket
    bind-mounted onto a workspace file, then a connect to that file, which the broker resolves
    through this process's root and mounts. Exit code: 0 connected, else 100 + errno."""
    target = os.path.join(args["dir"], f"{label}.mnt")
    open(target, "w").close()
    uid, gid = os.getuid(), os.getgid()
    pid = os.fork()
    if pid == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(0x10000000 | 0x20000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
                raise OSError(ctypes.get_errno(), "unshare")
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                try:  # the mount needs no mapping (observed): go on without one
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
                except OSError:
                    pass
            if libc.mount(address.encode(), target.encode(), None, 0x1000, None) != 0:  # MS_BIND
                raise OSError(ctypes.get_errno(), "mount")
            with socket.socket(socket.AF_UNIX, stream_kind(kind)) as s:
                s.connect(target)
                s.sendall(f"{label} through a user namespace's bind mount".encode())
            os._exit(0)
        except OSError as exc:
            os._exit(100 + (exc.errno or 0))
        except BaseException:
            os._exit(99)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "ok" if code == 0 else f"errno {code - 100}"


def pair_sendmsg(label, address):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendmsg([f"{label} pair sendmsg".encode()], [], 0, native(address))
    return "to the peer" if b.recv(64) else "lost"


for label, (address, kind) in args.get("targets", {}).items():
    if address.startswith("@"):
        attempt(f"{label}:connect", lambda: socket.socket(socket.AF_UNIX, stream_kind(kind)).connect(native(address)))
    elif kind == "dgram":
        link = os.path.join(args["dir"], f"{label}.link")
        os.symlink(address, link)
        attempt(f"{label}:link-sendmsg", lambda: pair_sendmsg(label, link))
    else:
        attempt(f"{label}:link", lambda: through_link(label, address, kind))
        attempt(f"{label}:race", lambda: race(label, address, kind))
        attempt(f"{label}:userns-bind", lambda: userns_bind(label, address, kind))
    if kind == "dgram":
        attempt(f"{label}:pair-sendmsg", lambda: pair_sendmsg(label, address))
attempt("socketpair_dgram", dgram_pair)
attempt("socketpair_dgram_flags", dgram_pair_flags)
attempt("socket_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close())
attempt("socketserver", socketserver_pair)
attempt("seqpacket", seqpacket_pair)
attempt("abstract_listen", abstract_listen)
print(json.dumps(out))

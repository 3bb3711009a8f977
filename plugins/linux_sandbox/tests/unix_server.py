"""Run outside the sandbox (as root or, through setpriv, as another user): serve the Unix
sockets the probe attacks and append every message or connection that reaches them to the
file argv[2]. argv[1]: JSON label -> [address, kind, mode or null]. Prints "ready"."""

import json
import os
import socket
import sys
import threading

targets, log = json.loads(sys.argv[1]), sys.argv[2]
lock = threading.Lock()


def record(what: str) -> None:
    with lock, open(log, "a") as f:
        f.write(what + "\n")


def serve_stream(label, sock):
    while True:
        conn, _ = sock.accept()
        record(f"{label}: connection")
        conn.settimeout(1)
        try:
            data = conn.recv(100)
            if data:
                record(f"{label}: {data.decode(errors='replace')}")
        except OSError:
            pass
        conn.close()


def serve_dgram(label, sock):
    while True:
        record(f"{label}: {sock.recv(100).decode(errors='replace')}")


for label, (address, kind, mode) in targets.items():
    stype = {"stream": socket.SOCK_STREAM, "dgram": socket.SOCK_DGRAM, "seqpacket": socket.SOCK_SEQPACKET}[kind]
    sock = socket.socket(socket.AF_UNIX, stype)
    sock.bind("\0" + address[1:] if address.startswith("@") else address)
    if mode is not None:
        os.chmod(address, int(mode, 8))
    if stype == socket.SOCK_DGRAM:
        threading.Thread(target=serve_dgram, args=(label, sock), daemon=True).start()
    else:
        sock.listen()
        threading.Thread(target=serve_stream, args=(label, sock), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin

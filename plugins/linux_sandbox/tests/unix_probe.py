"""Run inside the sandbox: try to reach each Unix socket given (JSON: label -> [address, kind])
by connect, sendto, sendmsg with msg_name (from a fresh datagram socket and from each kind of
socketpair) and sendmmsg; print label:method -> "sent" or the errno. A socket given as
"@name" is abstract. Also checks socketpair traffic still works."""

import ctypes
import json
import socket
import sys


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(Iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


LIBC = ctypes.CDLL(None, use_errno=True)


def sockaddr(address: str) -> bytes:
    path = b"\0" + address[1:].encode() if address.startswith("@") else address.encode()
    return socket.AF_UNIX.to_bytes(2, sys.byteorder) + path


def sendmmsg(sock: socket.socket, address: str, payload: bytes) -> None:
    addr = ctypes.create_string_buffer(sockaddr(address))
    data = ctypes.create_string_buffer(payload)
    iov = Iovec(ctypes.cast(data, ctypes.c_void_p), len(payload))
    msg = Mmsghdr(Msghdr(ctypes.cast(addr, ctypes.c_void_p), len(sockaddr(address)), ctypes.pointer(iov), 1, None, 0, 0), 0)
    if LIBC.sendmmsg(sock.fileno(), ctypes.byref(msg), 1, 0) < 0:
        raise OSError(ctypes.get_errno(), "sendmmsg")


def main() -> None:
    targets = json.loads(sys.argv[1])
    out = {}

    def attempt(name, fn):
        try:
            fn()
            out[name] = "sent"
        except OSError as exc:
            out[name] = f"errno {exc.errno}"

    for label, (address, kind) in targets.items():
        native = "\0" + address[1:] if address.startswith("@") else address
        msg = f"{label}".encode()
        stype = socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM
        for method, fn in {
            "connect": lambda: socket.socket(socket.AF_UNIX, stype).connect(native),
            "connect-seqpacket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).connect(native),
            "sendto": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"sendto " + msg, native),
            "sendmsg": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg([b"sendmsg " + msg], [], 0,
                                                                                        native),
            "sendmsg-raw": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_RAW).sendmsg([b"raw " + msg], [], 0,
                                                                                         native),
            "pair-dgram": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendmsg(
                [b"pair-dgram " + msg], [], 0, native),
            "pair-stream": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)[0].sendmsg(
                [b"pair-stream " + msg], [], 0, native),
            "pair-seqpacket": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)[0].sendmsg(
                [b"pair-seqpacket " + msg], [], 0, native),
            "sendmmsg": lambda: sendmmsg(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), address, b"mmsg " + msg),
            "sendmmsg-pair": lambda: sendmmsg(socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)[0], address,
                                              b"mmsg-pair " + msg),
        }.items():
            attempt(f"{label}:{method}", fn)
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET, socket.SOCK_DGRAM):
        a, b = socket.socketpair(socket.AF_UNIX, kind)
        a.sendmsg([b"ping"])
        out[f"socketpair-{kind}"] = b.recv(10).decode()
    print(json.dumps(out))


main()

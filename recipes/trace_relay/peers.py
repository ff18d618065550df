"""Who is at the other end of a TCP connection accepted on this machine: the uid the kernel holds for the client's
socket, when the client runs here.

The relay serves the run's own processes only, and it must know that before it spends anything on a connection (a
slot, a thread, a byte of its body): a token is read only after a slot is taken. The kernel knows the owner of both
ends of a loopback connection. Linux's sock_diag netlink interface answers for one socket, looked up by its four
addresses and ports (`ss` asks the same way; no privilege needed, one round trip, whatever the number of sockets on
the node); where netlink is not available, /proc/net/tcp{,6} lists every TCP socket with its uid.

Why loopback TCP and not a Unix socket in a private folder (SO_PEERCRED): weave's client speaks HTTP to a URL, in
every worker, through its own httpx client; a TCP loopback address needs nothing of weave, the workers of a node
reach it as they are, and the peer's uid is as certain (the kernel's, not the client's word).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBxI")  # inet_diag_req_v2: family, protocol, extensions, pad, states
_SOCKID = struct.Struct("!HH16s16s")  # inet_diag_sockid: source port, destination port, addresses (network order)
_SOCKID_TAIL = struct.Struct("=III")  # interface, cookie (2 x u32)
_UID_AT = _HEADER.size + 4 + 48 + 12  # inet_diag_msg: family, state, timer, retrans, sockid, expires, queues, uid


def peer_uid(conn: socket.socket) -> int | None:
    """The uid owning the client's end of `conn` (a connection this process accepted), or None when the client's
    socket is not on this machine (another host, or already gone)."""
    client, server = conn.getpeername()[:2], conn.getsockname()[:2]
    try:
        return _sock_diag_uid(conn.family, client, server)
    except OSError:  # no netlink here (a sandbox): read the kernel's tables
        return _proc_uid(conn.family, client, server)


def _packed(family: int, host: str) -> bytes:
    return socket.inet_pton(family, host).ljust(16, b"\0")


def _sock_diag_uid(family: int, client: tuple, server: tuple) -> int | None:
    """The client's socket is the one whose source is `client` and destination `server`."""
    sockid = _SOCKID.pack(client[1], server[1], _packed(family, client[0]), _packed(family, server[0]))
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, ALL_STATES) + sockid + _SOCKID_TAIL.pack(
        0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
    message = _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(2.0)
        diag.sendto(message, (0, 0))
        answer = diag.recv(8192)
    _, kind, _, _, _ = _HEADER.unpack_from(answer)
    if kind == NLMSG_ERROR:
        error = -struct.unpack_from("=i", answer, _HEADER.size)[0]
        if error in (0, 2):  # ENOENT: no such socket here
            return None
        raise OSError(error, os.strerror(error))
    if kind != SOCK_DIAG_BY_FAMILY or len(answer) < _UID_AT + 4:
        raise OSError(f"sock_diag answered type {kind}")
    return struct.unpack_from("=I", answer, _UID_AT)[0]


def _proc_uid(family: int, client: tuple, server: tuple) -> int | None:
    table = "/proc/net/tcp6" if family == socket.AF_INET6 else "/proc/net/tcp"
    wanted = (_proc_address(family, *client), _proc_address(family, *server))
    with open(table) as handle:
        next(handle)
        for line in handle:
            fields = line.split()
            if (fields[1], fields[2]) == wanted:
                return int(fields[7])
    return None


def _proc_address(family: int, host: str, port: int) -> str:
    """An address as /proc/net/tcp writes it: each 32-bit word of the address in the host's byte order, in hex."""
    raw = socket.inet_pton(family, host)
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


def is_local(host: str) -> bool:
    """Whether a peer address is this machine's loopback (a client on another host can only come with
    --allow-remote)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback

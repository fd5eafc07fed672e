"""Addresses: what the commands listen on, and free ports for the servers and clusters they start."""

import ipaddress
import socket
from collections.abc import Collection

# Ray's workers take ports in 10002-19999 (a node refuses a port of its own inside that range), so
# a port from there handed to another server could be taken by a Ray worker before that server binds.
RAY_WORKER_PORTS = range(10002, 20000)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an IP address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_ports(count: int, *, exclude: Collection[int] = ()) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on now, outside Ray's worker
    port range and `exclude`. Every socket stays bound until all are chosen: a port given back
    can be handed out again at once, and two components of one Ray node given the same port stop
    it from starting."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            held.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in RAY_WORKER_PORTS and port not in exclude:
                ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, outside Ray's worker port range."""
    return free_ports(1)[0]

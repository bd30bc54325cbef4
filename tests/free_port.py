"""A free TCP port on 127.0.0.1 for a server a test is about to start.

Not bind(0): that hands out a port from the kernel's ephemeral range, which
any outgoing connection (gRPC's, etcd's, Prometheus's) may take before the
server listens on it. A random port below that range, checked by bind, as
FreePort in tests/daemon/subprocess.cc does. Never the same port twice in one
process: two calls before either server listens could draw the same one."""

import random
import socket

_rng = random.SystemRandom()
_handed_out = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > 10000 else 32768


def free_port(host="127.0.0.1"):
    low, high = 10000, _ephemeral_low()
    for _ in range(200):
        port = _rng.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free TCP port on {host} in [{low}, {high}) "
                       "after 200 tries")

"""Joining the global `torch.distributed` process group, with a rendezvous that stays on loopback on one machine.

verl: `initialize_global_process_group_ray` (`verl/utils/distributed.py:82`) calls
`torch.distributed.init_process_group` with the RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT its
Ray worker group set (`env://`), and `create_tcp_store` (`verl/utils/distributed.py:101`) builds a
`TCPStore` that can take over a socket its caller already bound. minirl uses both ideas: with
`env://`, rank 0's `TCPStore` listens on *every* interface (`::`), whatever MASTER_ADDR says. When
MASTER_ADDR is a loopback address (every rank on this machine, the local Ray of
`minirl.single_controller.ray.init_ray`), rank 0 binds the store's socket to that address itself and
hands it over, and gloo's (and NCCL's bootstrap) sockets are pinned to the loopback interface, so
no rank listens on a reachable address. A MASTER_ADDR on the network (a real cluster) keeps
verl's plain `env://` start.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from datetime import timedelta
from typing import Any

import torch.distributed as dist

__all__ = ["create_tcp_store", "init_process_group", "is_loopback", "loopback_interface"]


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8, `::1` and `::ffff:127.x.y.z`."""
    host = (host or "").strip("[]")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def loopback_interface() -> str:
    """The name of the loopback network interface (`lo` on Linux, `lo0` on macOS)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and is_loopback(a.address) for a in addresses):
            return name
    return "lo"


def create_tcp_store(host: str, port: int, listen_socket: socket.socket | None = None, **kwargs: Any):
    """A `TCPStore`; with `listen_socket`, the store takes that (already bound) socket over
    (verl: `create_tcp_store`, `verl/utils/distributed.py:101`)."""
    if listen_socket is None:
        return dist.TCPStore(host_name=host, port=port, **kwargs)
    listen_fd = listen_socket.detach()
    try:
        return dist.TCPStore(host_name=host, port=port, master_listen_fd=listen_fd, **kwargs)
    except Exception:
        socket.close(listen_fd)
        raise


def _bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    return sock


def init_process_group(backend: str, rank: int, world_size: int, timeout: timedelta | None = None) -> None:
    """Join the global process group from MASTER_ADDR / MASTER_PORT; on loopback, listen on loopback only."""
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    if not is_loopback(host):
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size, timeout=timeout)
        return
    interface = loopback_interface()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)  # gloo's pair sockets bind this interface's address
    os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)
    timeout = timeout or timedelta(minutes=30)
    listen_socket = _bound_socket(host, port) if rank == 0 else None
    store = create_tcp_store(host, port, listen_socket, world_size=world_size, is_master=rank == 0,
                             timeout=timeout)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)

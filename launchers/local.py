"""Local launcher: one process per peer on this host, with torchrun's environment (several hosts: docs/clusters.md)."""
import os
import socket

import psutil

from launchers.base import Launcher, free_port
from launchers.placement import PlacementError


def node_network(master_addr: str) -> dict[str, str]:
    """Over several hosts: this host's address towards master_addr (the source address the kernel picks for it; no
    packet is sent), and gloo's interface unless set."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((master_addr, 9))
            address = sock.getsockname()[0]
    except OSError as exc:
        raise PlacementError(f"{socket.gethostname()} cannot reach launch.master_addr={master_addr}: {exc}") from exc
    env = {"AVGBENCH_PEER_ADDR": address}
    interface = next((name for name, addrs in psutil.net_if_addrs().items()
                      if any(a.address == address for a in addrs)), None)
    if interface and "GLOO_SOCKET_IFNAME" not in os.environ:
        env |= {"GLOO_SOCKET_IFNAME": interface, "TP_SOCKET_IFNAME": interface}
    return env


class LocalLauncher(Launcher):
    def start(self) -> None:
        launch = self.cfg.launch
        per_node = self.nprocs // launch.nnodes
        port = launch.master_port or free_port(launch.master_addr)
        master_addr = self.placement.address(0) or launch.master_addr
        network = node_network(str(master_addr)) if launch.nnodes > 1 else {}
        for local_rank in range(per_node):
            rank = launch.node_rank * per_node + local_rank
            env = self.base_env() | network | {
                "RANK": str(rank), "WORLD_SIZE": str(self.nprocs), "LOCAL_RANK": str(local_rank),
                "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(launch.node_rank),
                "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(port)} | self.placement.env(rank)
            self.spawn(rank, self.placement.wrap(rank, self.worker_command()), env)

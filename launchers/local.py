"""Local launcher: one process per peer on this host, with the torchrun environment contract.

Several hosts: run the same command on each with launch.nnodes, launch.node_rank,
launch.master_addr and a fixed launch.master_port; ranks node_rank*nprocs_per_node+i
start here. Under network=emulated each rank runs on its own emulated host
(launchers/placement.py) and MASTER_ADDR is rank 0's address there.
"""
from launchers.base import Launcher, free_port


class LocalLauncher(Launcher):
    def start(self) -> None:
        launch = self.cfg.launch
        per_node = self.nprocs // launch.nnodes
        port = launch.master_port or free_port(launch.master_addr)
        master_addr = self.placement.address(0) or launch.master_addr
        for local_rank in range(per_node):
            rank = launch.node_rank * per_node + local_rank
            env = self.base_env() | {
                "RANK": str(rank), "WORLD_SIZE": str(self.nprocs),
                "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_node),
                "GROUP_RANK": str(launch.node_rank),
                "MASTER_ADDR": str(master_addr), "MASTER_PORT": str(port),
            } | self.placement.env(rank)
            self.spawn(rank, self.placement.wrap(rank, self.worker_command()), env)

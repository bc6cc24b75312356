"""Emulated cluster on one machine: per-host network namespaces, shaped links, an rsh/ssh agent; independent of
launchers and strategies (launchers/placement.py puts peers on these hosts)."""
from netemu.fabric import INTERFACE, SUBNET, Fabric, FabricError, Host, host_address, processes_in

__all__ = ["INTERFACE", "SUBNET", "Fabric", "FabricError", "Host", "host_address", "processes_in"]

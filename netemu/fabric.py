"""An emulated cluster on one machine: one network namespace per host (h<i>, eth0 = 10.213.7.<i+1>/24) on a private
bridge, each link shaped by tc token buckets both ways, each host on its own cores and with its own hostname. All of
it lives in a holder process's private namespaces and ends with the run. How it is built and why:
docs/emulation.md (How it is built)."""
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SUBNET = "10.213.7"  # the project's own /24: 10.213.7.0/24, nothing else is ever addressed
PREFIX_LEN = 24
MAX_HOSTS = 253      # .1 .. .253
INTERFACE = "eth0"   # the host's interface, the same name in every host namespace
ETHERNET_MTU = 1500  # a veth's default frame size (bytes, the largest IP packet): standard Ethernet's
QUEUE_MS = 50        # tbf queue: at most this many ms of traffic wait before drops
MIN_MTU, MAX_MTU = 68, 65535  # a veth pair's range (bytes)
FRAME_HEADER = 14    # Ethernet header: a frame is at most mtu + this many bytes

HOST_SCRIPT = 'hostname "$0"; exec "$@"'  # a host's command: its own hostname, then the command
HOLDER_SCRIPT = (  # $0: the fabric's /etc/hosts; $1: its temporary directory, removed when the launcher is gone
    "set -e; "
    "if [ -d /run/netns ]; then mount -t tmpfs avgbench-netns /run/netns; "
    "else mount -t tmpfs avgbench-run /run; mkdir /run/netns; fi; "
    'mount --bind "$0" /etc/hosts; '
    "ip link set lo up; ip link add name br0 type bridge; ip link set br0 up; "
    'echo ready; cat >/dev/null; rm -rf "$1"'
)


class FabricError(RuntimeError):
    """Setting up the emulated network failed; the message says which command and why."""


def host_address(index: int) -> str:
    return f"{SUBNET}.{index + 1}"


def host_name(index: int) -> str:
    """Host i's hostname (also its network namespace's name)."""
    return f"h{index}"


def unprivileged() -> bool:
    return os.geteuid() != 0


def tbf_args(rate_mbit: float, mtu: int = ETHERNET_MTU) -> list[str]:
    """Token bucket for `rate_mbit`, queue QUEUE_MS: burst of 1 ms of traffic, at least 4 KiB and two frames of `mtu`
    (a bucket smaller than a frame never sends it)."""
    rate_bytes = rate_mbit * 1e6 / 8
    burst = max(4096, 2 * (mtu + FRAME_HEADER), int(rate_bytes * 0.001))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", f"{QUEUE_MS}ms"]


@dataclass
class Host:
    """One emulated host: its namespace, address, link, and how to run a command in it."""

    index: int
    netns: str
    addr: str
    bandwidth_mbit: float | None
    latency_ms: float
    mtu: int          # the largest IP packet its link carries (bytes)
    netns_inode: int  # identifies the namespace (as in /proc/PID/ns/net) while it exists
    enter: list[str]  # command prefix: runs the rest of the command line in this host's namespace (and cores)
    tmpdir: str       # this host's own temporary directory (TMPDIR of commands the agent starts)
    cores: list[int] | None = None  # the host's own cores (None: the launcher's, shared by every host)


class Fabric:
    def __init__(self, hosts: int, bandwidth_mbit: list[float | None], latency_ms: float = 0.0,
                 env: dict[str, str] | None = None, host_cores: list[list[int]] | None = None, mtu: int = ETHERNET_MTU):
        if not 1 <= hosts <= MAX_HOSTS:
            raise FabricError(f"an emulated network holds 1..{MAX_HOSTS} hosts, not {hosts}")
        self.count, self.bandwidth, self.latency_ms, self.mtu = hosts, bandwidth_mbit, latency_ms, mtu
        self.env, self.host_cores = env, host_cores
        self.holder: subprocess.Popen[bytes] | None = None
        self.directory = ""  # the fabric's temporary directory: its /etc/hosts, one TMPDIR per host
        self.hosts: list[Host] = []

    def start(self) -> "Fabric":
        user = ["--user", "--map-root-user"] if unprivileged() else []
        self.directory = tempfile.mkdtemp(prefix="netemu-")
        os.chmod(self.directory, 0o755)
        hosts_file = os.path.join(self.directory, "hosts")
        with open(hosts_file, "w") as f:
            f.write(hosts_table({host_name(i): i for i in range(self.count)}))
        try:
            self.holder = holder = subprocess.Popen(
                ["unshare", "--net", "--mount", "--propagation", "private", *user, "sh", "-c", HOLDER_SCRIPT,
                 hosts_file, self.directory],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                start_new_session=True,
            )
            assert holder.stdout is not None and holder.stderr is not None  # pipes
            if holder.stdout.readline().strip() != b"ready":
                holder.wait(timeout=10)
                raise FabricError("could not create the network namespaces: "
                                  f"{holder.stderr.read().decode().strip()}{privilege_hint()}")
            holder.stdout.close()
            for i in range(self.count):
                self._add_host(i)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """End the holder: the namespaces (once their last process is gone) and the temporary directory go with it."""
        try:
            if self.holder is not None:
                assert self.holder.stdin is not None and self.holder.stderr is not None  # pipes
                self.holder.stdin.close()
                try:
                    self.holder.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.holder.kill()
                    self.holder.wait()
                self.holder.stderr.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "Fabric":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def holder_pid(self) -> int:
        if self.holder is None:
            raise FabricError("the fabric is not started")
        return self.holder.pid

    def hub_prefix(self) -> list[str]:
        """Runs a command in the hub (the holder's namespaces)."""
        user = ["--user", "--preserve-credentials"] if unprivileged() else []
        return ["nsenter", f"--target={self.holder_pid()}", "--net", "--mount", *user, "--"]

    def _run(self, *args: str, stdin: str | None = None) -> None:
        done = subprocess.run([*self.hub_prefix(), *args], input=stdin, capture_output=True, text=True,
                              env=self.env, timeout=30)
        if done.returncode:
            raise FabricError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")

    def _add_host(self, i: int) -> None:
        ns, veth, rate = host_name(i), f"v{i}", self.bandwidth[i]
        self._run("ip", "netns", "add", ns)
        self._run("ip", "-batch", "-", stdin=lines(
            f"link add name {veth} gso_max_segs 1 mtu {self.mtu} type veth peer name {INTERFACE} gso_max_segs 1 "
            f"mtu {self.mtu} netns {ns}",
            f"link set {veth} master br0 up",
        ))
        self._run("ip", "-n", ns, "-batch", "-", stdin=lines(
            "link set lo up",
            f"addr add {host_address(i)}/{PREFIX_LEN} dev {INTERFACE}",
            f"link set {INTERFACE} up",
        ))
        if self.latency_ms:
            self._run("tc", "-n", ns, "qdisc", "add", "dev", INTERFACE, "root", "handle", "1:",
                      "netem", "delay", f"{self.latency_ms}ms")
        if rate:
            parent = ["parent", "1:1", "handle", "2:"] if self.latency_ms else ["root"]  # under netem
            self._run("tc", "-n", ns, "qdisc", "add", "dev", INTERFACE, *parent, *tbf_args(rate, self.mtu))
            self._run("tc", "qdisc", "add", "dev", veth, "root", *tbf_args(rate, self.mtu))
        cores = self.host_cores[i] if self.host_cores else None
        on_cores = ["taskset", "-c", ",".join(map(str, cores))] if cores else []
        # nsenter, not `ip netns exec`: that mounts a /sys of its own, without the cgroup file systems, and the
        # peers could not join their CPU groups
        enter = [*self.hub_prefix(), *on_cores, "nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "sh", "-c",
                 HOST_SCRIPT, host_name(i)]
        inode = os.stat(f"/proc/{self.holder_pid()}/root/run/netns/{ns}").st_ino
        tmpdir = os.path.join(self.directory, ns)
        os.mkdir(tmpdir)
        self.hosts.append(Host(i, ns, host_address(i), rate, self.latency_ms, self.mtu, inode, enter, tmpdir, cores))

    def describe(self) -> dict[str, Any]:
        """What network.json holds: enough for the MPI/ssh agent and for tests."""
        hub = Path(f"/proc/{self.holder_pid()}/ns")
        return {
            "subnet": f"{SUBNET}.0/{PREFIX_LEN}",
            "holder_pid": self.holder_pid(),
            "directory": self.directory,
            "hub_netns_inode": os.stat(hub / "net").st_ino,
            "hub_mntns_inode": os.stat(hub / "mnt").st_ino,
            "hosts": [asdict(h) for h in self.hosts],
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.describe(), indent=1))


def processes_in(description: dict[str, Any]) -> list[int]:
    """PIDs still inside a fabric's namespaces (its hub or any host): empty once it is gone."""
    inodes = {("net", h["netns_inode"]) for h in description["hosts"]}
    inodes |= {("net", description["hub_netns_inode"]), ("mnt", description["hub_mntns_inode"])}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for kind in ("net", "mnt"):
            try:
                if (kind, os.stat(f"/proc/{pid}/ns/{kind}").st_ino) in inodes:
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found


def lines(*commands: str) -> str:
    return "\n".join(commands) + "\n"


def privilege_hint() -> str:
    if not unprivileged():
        return ""
    return ("; as a non-root user network=emulated needs unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0, no AppArmor "
            "restriction), or run as root")


# --- machines of their own (SLURM nodes) ----------------------------------------------
MACHINE_SCRIPT = 'hostname "$0"; mount --bind "$1" /etc/hosts; shift; exec "$@"'


def hosts_table(names: dict[str, int]) -> str:
    """/etc/hosts of an emulated cluster: each machine's name at its host's address (name -> host index)."""
    return "127.0.0.1 localhost\n" + "".join(f"{host_address(i)} {name}\n" for name, i in names.items())


def machine_prefix(host: Host, hostname: str, hosts_file: Path) -> list[str]:
    """Command prefix: runs a command on `host` as a machine of its own (a SLURM node): the host's network namespace,
    its own hostname and an /etc/hosts of `hosts_file`, inherited by everything the command starts."""
    hub = host.enter[:host.enter.index("unshare")]  # the hub, the host's cores and its network namespace
    return [*hub, "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c", MACHINE_SCRIPT, hostname,
            str(hosts_file)]


def processes_on(host: Host) -> list[int]:
    """PIDs inside one host's network namespace (a machine's own processes, e.g. a SLURM node's daemons and jobs)."""
    return processes_in({"hosts": [asdict(host)], "hub_netns_inode": None, "hub_mntns_inode": None})

"""A real SLURM cluster on this machine, for the SLURM tests: munged, slurmctld and one slurmd per node, each node
a machine of its own on the project's emulated fabric (netemu): its own network namespace and address (NodeAddr),
its own hostname (UTS namespace) and the cluster's /etc/hosts. The controller, munged and the user's commands run
on a login host of their own. Debian's munge and slurm-wlm (scripts/setup.sh installs them); every file, port and
socket of the cluster is in a temporary directory or inside the fabric's namespaces, and nothing of it outlives
the `with` block."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from helpers import ROOT
from job.process import wait_until
from netemu import Fabric, processes_in
from netemu.fabric import INTERFACE, hosts_table, machine_prefix, processes_on

COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
LOGIN, PARTITION = "login", "avgbench"
SLURMCTLD_PORT, SLURMD_PORT = 6817, 6818  # each daemon in a namespace of its own: the standard ports clash with none
SLURMD_TIMEOUT_S = 5                     # a node whose slurmd stops answering is down after this (default 300)


# in a comment just above the documented recipe in docs/
RECIPE_MARK = "tests/integration/test_slurm.py runs this command as written"


def doc_recipe() -> list[str]:
    """The two-node command the documentation shows: the first command of the code block after RECIPE_MARK, as its
    words (the same command wherever the documentation holds it)."""
    found = set()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        if RECIPE_MARK in text:
            block = text.split(RECIPE_MARK, 1)[1].split("```", 2)[1]  # the block's info string, then its lines
            found.add(block.splitlines()[1].strip())
    assert len(found) == 1, f"the documentation shows {len(found)} commands marked {RECIPE_MARK!r}: {found}"
    return shlex.split(found.pop())


def why_no_slurm() -> str | None:
    """Why the SLURM tests cannot run here (None: they can)."""
    absent = [name for name in COMMANDS if shutil.which(name) is None]
    if absent:
        return (f"SLURM is not installed ({', '.join(absent)} missing): "
                "apt-get install slurm-wlm munge (scripts/setup.sh does)")
    if os.geteuid() != 0:
        return "slurmd, a private munged and the emulated hosts' namespaces need root: run the test as root"
    return None


def node_names(nodes: int) -> list[str]:
    return [f"node{i}" for i in range(nodes)]


def slurm_conf(top: Path, login_address: str, nodes: list[tuple[str, str]]) -> str:
    """The nodes (each with this machine's CPUs and memory, as `slurmd -C` reports them) at their fabric addresses,
    root-run, no accounting, whole nodes per job, processes tracked by their parent ids (proctrack/linuxproc, no
    cgroups of SLURM's own beside the project's CPU cgroups); a node silent for SLURMD_TIMEOUT_S is down."""
    hardware = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    hardware = re.sub(r"^NodeName=\S+ ", "", hardware)
    node_lines = "".join(f"NodeName={name} NodeHostname={name} NodeAddr={address} {hardware} State=UNKNOWN\n"
                         for name, address in nodes)
    (top / "plugstack.conf").write_text("")
    return f"""ClusterName=avgbench
SlurmctldHost={LOGIN}({login_address})
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
AuthInfo=socket={top}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={top}/state
SlurmdSpoolDir={top}/spool/%n
SlurmctldPidFile={top}/slurmctld.pid
SlurmdPidFile={top}/spool/%n/slurmd.pid
PlugStackConfig={top}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout={SLURMD_TIMEOUT_S}
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{node_lines}PartitionName={PARTITION} Nodes={','.join(name for name, _ in nodes)} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """`with SlurmCluster(2) as cluster:` a running cluster of node0..node<N-1>; cluster.run(...) runs a command on
    the login host (as a user would), with SLURM_CONF pointing at the cluster."""

    def __init__(self, nodes: int):
        self.nodes = node_names(nodes)
        self.top = Path(tempfile.mkdtemp(prefix="avgbench-slurm-"))  # short: munge's socket path has a length limit
        self.conf = self.top / "slurm.conf"
        self.env = os.environ | {"SLURM_CONF": str(self.conf)}
        self.fabric = Fabric(1 + nodes, [None] * (1 + nodes))  # host 0: login; host 1+i: node i
        self.daemons: dict[str, subprocess.Popen] = {}
        self.description: dict | None = None

    # --- where things run ---------------------------------------------------------------
    def host_of(self, name: str):
        return self.fabric.hosts[0 if name == LOGIN else 1 + self.nodes.index(name)]

    def on(self, name: str) -> list[str]:
        """Command prefix: runs a command on the login host or on a node, as that machine."""
        return machine_prefix(self.host_of(name), name, self.top / "hosts")

    def run(self, command: list[str], cwd: Path = Path("/"), **kwargs) -> subprocess.CompletedProcess:
        """Runs a command on the login host in directory cwd (entering the namespaces leaves the caller's)."""
        return subprocess.run([*self.on(LOGIN), "env", f"--chdir={cwd}", *command], env=self.env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs)

    def start(self, command: list[str], cwd: Path, stdout) -> subprocess.Popen:
        """Start a command on the login host in directory cwd, its output (stdout and stderr) to stdout."""
        return subprocess.Popen([*self.on(LOGIN), "env", f"--chdir={cwd}", *command], env=self.env, stdout=stdout,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self, name: str) -> str:
        path = self.top / f"{name}.log"
        return f"--- {name}.log:\n{path.read_text()[-2000:]}" if path.exists() else f"--- no {name}.log"

    # --- life cycle ---------------------------------------------------------------------
    def __enter__(self) -> "SlurmCluster":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self.fabric.start()
        self.description = self.fabric.describe()
        top = self.top
        for sub in ("munge", "state", "spool", *(f"spool/{n}" for n in self.nodes)):
            (top / sub).mkdir(mode=0o700)
        (top / "munge").chmod(0o711)  # clients reach the socket inside
        (top / "munge" / "munge.key").write_bytes(os.urandom(128))
        (top / "munge" / "munge.key").chmod(0o400)
        names = {LOGIN: 0} | {name: 1 + i for i, name in enumerate(self.nodes)}
        (top / "hosts").write_text(hosts_table(names))
        nodes = [(name, self.host_of(name).addr) for name in self.nodes]
        self.conf.write_text(slurm_conf(top, self.host_of(LOGIN).addr, nodes))
        munge = ["--socket", f"{top}/munge/socket", "--key-file", f"{top}/munge/munge.key",
                 "--pid-file", f"{top}/munge/pid", "--seed-file", f"{top}/munge/seed"]
        self._daemon("munged", LOGIN, ["munged", "--foreground", "--force", *munge])
        assert wait_until((top / "munge" / "socket").exists, 10), self.log("munged")
        self._daemon("slurmctld", LOGIN, ["slurmctld", "-D", "-f", str(self.conf)])
        for name in self.nodes:
            self.start_slurmd(name)
        assert wait_until(self.all_idle, 30, interval=0.5), "the SLURM nodes did not come up:\n" + "\n".join(
            self.log(name) for name in ("munged", "slurmctld", *self.nodes))

    def _daemon(self, name: str, host: str, command: list[str]) -> None:
        with (self.top / f"{name}.log").open("a") as log:
            self.daemons[name] = subprocess.Popen([*self.on(host), *command], env=self.env, stdout=log,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                  start_new_session=True)

    def states(self) -> dict[str, str]:
        """Each node's state as sinfo reports it (idle, alloc, down*, ...)."""
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30)
        return dict(line.split() for line in done.stdout.splitlines() if line.strip())

    def all_idle(self) -> bool:
        return self.states() == {name: "idle" for name in self.nodes}

    def close(self) -> None:
        """Cancel every job, then end every process left in the cluster's namespaces; remove its directory."""
        if self.description is not None:
            subprocess.run([*self.on(LOGIN), "scancel", f"--partition={PARTITION}"], env=self.env,
                           capture_output=True, timeout=30)
            for pid in processes_in(self.description):  # the daemons, job steps and their processes
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_until(lambda: not processes_in(self.description), 20, interval=0.2)
        self.fabric.close()
        for proc in self.daemons.values():
            proc.wait(timeout=10)
        shutil.rmtree(self.top, ignore_errors=True)

    # --- what tests look at and do --------------------------------------------------------
    def interface_bytes(self, name: str) -> tuple[int, int]:
        """(received, sent) bytes so far on a machine's interface on the fabric, as the kernel counts them."""
        done = subprocess.run([*self.fabric.hub_prefix(), "ip", "-j", "-s", "-n", self.host_of(name).netns, "link",
                               "show", INTERFACE], capture_output=True, text=True, check=True, timeout=30)
        stats = json.loads(done.stdout)[0]["stats64"]
        return stats["rx"]["bytes"], stats["tx"]["bytes"]

    def kill_slurmd(self, name: str) -> None:
        """SIGKILL a node's slurmd (its running job steps stay, as on a real node whose slurmd dies)."""
        self.daemons[name].kill()
        self.daemons[name].wait()

    def start_slurmd(self, name: str) -> None:
        """(Re)start a node's slurmd (no -N: it finds its NodeName from its own hostname); a node SLURM marked down
        returns to service when it registers (ReturnToService=2)."""
        self._daemon(name, name, ["slurmd", "-D", "-f", str(self.conf)])

    def job_processes(self, name: str) -> list[int]:
        """The processes on a node other than its slurmd (job steps and what they started)."""
        return [pid for pid in processes_on(self.host_of(name)) if pid != self.daemons[name].pid]

    def wait_for_state(self, name: str, prefix: str, timeout_s: float) -> bool:
        return wait_until(lambda: self.states().get(name, "").startswith(prefix), timeout_s, interval=1)

"""A sweep submitted to a real one-node SLURM cluster through Hydra's submitit launcher (README: "Runs over
several hosts", SLURM). The test starts its own munged, slurmctld and slurmd (Debian's munge and slurm-wlm,
installed by scripts/setup.sh) in a temporary directory on free ports, and stops them and every job after."""
import csv
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from helpers import ROOT
from job.process import kill_processes, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
NODE = "avgbench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def slurm_conf(top: Path) -> str:
    """One node (this machine's CPUs and memory, as `slurmd -C` reports them) on loopback, root-run, no
    accounting, whole nodes per job; every port, state and log inside top."""
    hardware = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    node = re.sub(r"^NodeName=\S+", f"NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1", hardware)
    (top / "plugstack.conf").write_text("")
    return f"""ClusterName=avgbench
SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={top}/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={top}/state
SlurmdSpoolDir={top}/spool
SlurmctldPidFile={top}/slurmctld.pid
SlurmdPidFile={top}/slurmd.pid
PlugStackConfig={top}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
{node} State=UNKNOWN
PartitionName={NODE} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def processes_of_cluster(top: Path) -> list[psutil.Process]:
    """The daemons and every job process (they carry SLURM_CONF=top/slurm.conf in their environment), and each
    job step's slurmstepd (its environment is empty; its socket is in top/spool)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and (proc.environ().get("SLURM_CONF") == str(top / "slurm.conf") or any(
                    c.laddr.startswith(f"{top}/") for c in proc.net_connections(kind="unix"))):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def slurm_cluster():
    """SLURM_CONF of a running one-node cluster; afterwards no daemon or job of it is left, the directory gone."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        pytest.skip(f"SLURM is not installed ({', '.join(absent)} missing): "
                    "apt-get install slurm-wlm munge (scripts/setup.sh does)")
    if os.geteuid() != 0:
        pytest.skip("slurmd and a private munged run as root here: run the test as root")
    top = Path(tempfile.mkdtemp(prefix="avgbench-slurm-"))  # short: munge's socket path has a length limit
    conf = top / "slurm.conf"
    env = os.environ | {"SLURM_CONF": str(conf)}
    try:
        for sub in ("munge", "state", "spool"):
            (top / sub).mkdir(mode=0o700)
        (top / "munge" / "munge.key").write_bytes(os.urandom(128))
        (top / "munge" / "munge.key").chmod(0o400)
        conf.write_text(slurm_conf(top))
        munge = ["--socket", f"{top}/munge/socket", "--key-file", f"{top}/munge/munge.key",
                 "--pid-file", f"{top}/munge/pid", "--seed-file", f"{top}/munge/seed"]
        for name, command in (("munged", ["munged", "--foreground", "--force", *munge]),
                              ("slurmctld", ["slurmctld", "-D", "-f", str(conf)]),
                              ("slurmd", ["slurmd", "-D", "-f", str(conf), "-N", NODE])):
            with (top / f"{name}.log").open("w") as log:
                subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            if name == "munged":
                assert wait_until((top / "munge" / "socket").exists, 10), (top / "munged.log").read_text()

        def node_idle() -> bool:
            done = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], env=env, capture_output=True, text=True)
            return done.stdout.strip() == "idle"

        assert wait_until(node_idle, 30, interval=0.5), "the SLURM node did not come up:\n" + "\n".join(
            (top / f"{name}.log").read_text()[-2000:] for name in ("munged", "slurmctld", "slurmd"))
        yield env
    finally:
        subprocess.run(["scancel", f"--partition={NODE}"], env=env, capture_output=True, timeout=30)
        # the steps end first: a slurmstepd whose slurmd is gone waits for it
        wait_until(lambda: not [p for p in processes_of_cluster(top) if p.name().startswith("slurmstepd")], 20, 0.5)
        kill_processes(processes_of_cluster(top), grace_s=10)
        shutil.rmtree(top, ignore_errors=True)


def job_span(log_out: Path) -> tuple[str, str]:
    """When submitit started and ended a job, from its log (timestamps sort as text)."""
    stamps = re.findall(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)", log_out.read_text())
    return stamps[0], stamps[-1]


def test_sweep_runs_as_slurm_jobs_and_reports(slurm_cluster, tmp_path):
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=slurm", "strategy=allreduce,single",
               "peers=2", "repeats=1", "model=tiny", "max_steps=10", "eval_every=0", "progress=false", "sampler.interval=0.2",
               f"hydra.sweep.dir={sweep}"]
    try:
        done = subprocess.run(command, cwd=ROOT, env=slurm_cluster, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:  # submitit waits for result files; a job that died leaves none
        logs = "\n".join(f"{p}:\n{p.read_text()[-1500:]}" for p in sorted(sweep.glob(".submitit/*/*_log.*")))
        raise AssertionError(f"the sweep did not end within {exc.timeout} s; job logs:\n{logs}") from exc
    assert done.returncode == 0, done.stderr[-3000:]

    jobs = sorted(sweep.glob(".submitit/*_*/*_0_log.out"))  # one SLURM array task per sweep job
    assert len(jobs) == 2 and all("Exiting after successful completion" in p.read_text() for p in jobs), jobs
    first, second = sorted(job_span(p) for p in jobs)
    assert first[1] <= second[0], f"the two runs shared the node: {first} and {second}"  # exclusive

    rows = list(csv.DictReader((sweep / "runs.csv").open()))
    assert sorted(r["config.strategy.name"] for r in rows) == ["allreduce", "single"], rows
    assert all(r["status"] == "completed" for r in rows), rows
    assert all(Path(r["run_dir"]).name == "node0" and Path(r["run_dir"]).parents[2] == sweep for r in rows)  # block0/NAME/node0
    assert not list(sweep.glob("**/baseline_*")), "with report.baselines off, the sweep runs only what was asked"
    allreduce = next(r for r in rows if r["config.strategy.name"] == "allreduce")
    assert float(allreduce["speedup_vs_single"]) > 0  # measured against the sweep's own single run
    assert (sweep / "report.html").stat().st_size > 10_000

"""SLURM through Hydra's submitit launcher (docs/clusters.md): job arrays, each job awaited with squeue; one that ends
other than COMPLETED, or without its result, becomes a failed JobReturn saying why, and the sweep goes on."""
import itertools
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import yaml
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import OmegaConf

from job.process import wait_until

if TYPE_CHECKING:
    import submitit

WAITING = {"UNKNOWN", "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STOPPED",
           "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
POLL_S = 2.0
RESULT_GRACE_S = 30.0  # a result file written just before the job ended may take this long to show (shared file system)
NODE_FAILURE = re.compile(r"Node failure on (\S+)")


class SlurmLauncher(SubmititSlurmLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        numbered = list(enumerate(job_overrides, initial_job_idx))
        for number, overrides in numbered:
            print(f"avgbench: SLURM job #{number}: {' '.join(filter_overrides(overrides))}", file=sys.stderr,
                  flush=True)
        in_order = self.params.get("array_parallelism") == 1
        jobs: dict[int, submitit.Job[JobReturn]] = {}
        previous = None
        for resources, group in arrays(numbered):
            params = self.params | resources
            if in_order and previous:
                params["dependency"] = f"afterany:{previous}"
            submitted = self.executor(params).map_array(self, *zip(*[(list(overrides), "hydra.sweep.dir", number,
                                                                      f"job_id_for_{number}", Singleton.get_state())
                                                                     for number, overrides in group]))
            jobs |= {number: job for (number, _), job in zip(group, submitted)}
            previous = submitted[0].job_id.split("_")[0]  # the array's id: afterany waits for all its tasks
        return [job_return(jobs[number], list(overrides)) for number, overrides in numbered]

    def executor(self, params: dict[str, Any]) -> "submitit.AutoExecutor":
        """submitit's executor for these hydra.launcher parameters (as Hydra's SlurmLauncher passes them)."""
        import submitit

        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, folder=params["submitit_folder"],
                                         slurm_max_num_timeout=params["max_num_timeout"])
        queue_keys = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{key if key in queue_keys else f"{self._EXECUTOR}_{key}": value
                                      for key, value in params.items()
                                      if key not in ("submitit_folder", "max_num_timeout")})
        return executor


def arrays(numbered: list[tuple[int, Sequence[str]]]) -> list[tuple[dict[str, Any], list[tuple[int, Sequence[str]]]]]:
    """(resources, jobs) of each array: one per run of consecutive jobs with the same own_resources."""
    return [(resources, list(group))
            for resources, group in itertools.groupby(numbered, key=lambda job: own_resources(job[1]))]


def own_resources(overrides: Sequence[str]) -> dict[str, Any]:
    """A job's own hydra.launcher.* overrides (e.g. a one-process baseline's nodes=1), for its array."""
    pairs = (override.partition("=") for override in overrides)
    return {key.removeprefix("hydra.launcher."): yaml.safe_load(value) for key, _, value in pairs
            if key.startswith("hydra.launcher.")}


def job_return(job: "submitit.Job[JobReturn]", overrides: list[str]) -> JobReturn:
    """The job's JobReturn once SLURM says it ended: its first task's, else a failed one naming why."""
    while (state := slurm_state(job.job_id)) in WAITING:
        time.sleep(POLL_S)
    first = job.task(0)  # node rank 0: its task's result is the job's, and the batch step logs to its files
    problems = [] if state in ("COMPLETED", None) else [f"SLURM ended it {state}"]
    problems += [f"node failure on {node} (node rank {rank})" for node, rank in node_failures(first, job.job_id)]
    try:
        if not wait_until(first.paths.result_pickle.exists, RESULT_GRACE_S, interval=1):
            raise RuntimeError("it ended without writing its result")
        result = first.result()
    except Exception as exc:  # the job raised, or SLURM ended it first
        problems.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    if not problems:
        return result
    message = (f"SLURM job {job.job_id} ({' '.join(filter_overrides(overrides))}) failed: {'; '.join(problems)}; "
               f"its logs: {first.paths.stderr.parent}")
    print(f"avgbench: {message}", file=sys.stderr, flush=True)
    return JobReturn(overrides=overrides, status=JobStatus.FAILED, _return_value=RuntimeError(message))


def slurm_state(job_id: str) -> str | None:
    """The job's state from squeue; None once SLURM forgot it, UNKNOWN while squeue cannot answer."""
    done = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"], capture_output=True,
                          text=True, timeout=60)
    if done.returncode:
        return None if "Invalid job id" in done.stderr else "UNKNOWN"
    states = done.stdout.split()
    return states[0] if states else None


def node_failures(task: "submitit.Job[JobReturn]", job_id: str) -> list[tuple[str, int]]:
    """The nodes srun reported failed (in the batch step's log), each with its node rank in the job."""
    log = task.paths.stderr
    failed = NODE_FAILURE.findall(log.read_text(errors="replace")) if log.exists() else []
    nodes = job_nodes(job_id) if failed else []
    return [(node, nodes.index(node) if node in nodes else -1) for node in dict.fromkeys(failed)]


def job_nodes(job_id: str) -> list[str]:
    """The job's nodes in node-rank order (SLURM_NODEID follows the expanded node list)."""
    listed = subprocess.run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%N"], capture_output=True, text=True,
                            timeout=60).stdout.strip()
    return subprocess.run(["scontrol", "show", "hostnames", listed], capture_output=True, text=True,
                          timeout=60).stdout.split() if listed else []

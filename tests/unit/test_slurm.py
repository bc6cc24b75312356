"""Sweeps submitted to a real SLURM cluster through Hydra's submitit launcher (docs/clusters.md): one node, and two
nodes, each a machine of its own on the project's emulated fabric (tests/slurm_cluster.py: munged, slurmctld and one
slurmd per node, each node with its own network namespace, address and hostname). The two-node test runs the
recipe the documentation shows, as written; the fault test kills a peer, and a node's slurmd, mid-job."""
from types import SimpleNamespace

from omegaconf import OmegaConf

from helpers import ROOT, compose_config
from launchers import slurm as slurm_launcher
from launchers.local import node_network
from slurm_cluster import doc_recipe


def test_the_documented_recipe_runs_two_strategies_on_two_nodes():
    words = doc_recipe()
    assert words[:5] == [".venv/bin/python", "train.py", "-m", "experiment=slurm", "hydra.launcher.nodes=2"], words
    assert "peers=4" in words
    assert next(w for w in words if w.startswith("strategy=")) == "strategy=allreduce,hivemind"


def test_jobs_go_through_the_launcher_that_names_failed_jobs_and_find_the_project():
    launcher = compose_config("experiment=slurm", return_hydra_config=True).hydra.launcher
    assert launcher._target_ == "hydra_plugins.avgbench_launcher.SlurmLauncher"
    assert launcher.additional_parameters.no_requeue is True  # a node failure must not start the run again
    assert OmegaConf.to_container(launcher, resolve=True)["setup"] == [f"export PYTHONPATH={ROOT}:$PYTHONPATH"]


def test_a_node_failure_is_named_with_its_node_rank(tmp_path, monkeypatch):
    log = tmp_path / "7_1_0_log.err"  # srun's and slurmstepd's lines as SLURM 22.05 writes them into the batch log
    log.write_text("slurmstepd-node0: error: *** STEP 7.0 ON node0 CANCELLED AT 2026-11-25T16:34:19 DUE TO NODE "
                   "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\nsrun: error: Node failure on node2\n"
                   "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n")
    monkeypatch.setattr(slurm_launcher, "job_nodes", lambda job_id: ["node0", "node2"])  # the job's node list
    task = SimpleNamespace(paths=SimpleNamespace(stderr=log))
    assert slurm_launcher.node_failures(task, "7_1") == [("node2", 1)]
    log.write_text("submitit INFO - Job completed successfully\n")
    assert slurm_launcher.node_failures(task, "7_1") == []


def test_a_job_with_its_own_launcher_overrides_is_submitted_with_them():
    """A sweep over two nodes with a one-process baseline: the baseline's array asks for one node."""
    baseline = ["strategy=single", "peers=1", "hydra.launcher.nodes=1", "hydra.sweep.subdir='block0/baseline_1x1'"]
    assert slurm_launcher.own_resources(baseline) == {"nodes": 1}
    assert slurm_launcher.own_resources(["strategy=allreduce", "peers=4"]) == {}


def test_a_batch_is_submitted_as_arrays_in_the_planned_order():
    """Consecutive jobs that ask for the same resources share an array; the arrays keep the sweep's order (each
    waits for the one before it), so a block's one-node baseline between two two-node runs is an array of its own."""
    two, one = ["hydra.launcher.nodes=2"], ["hydra.launcher.nodes=1"]
    numbered = list(enumerate([["strategy=allreduce", *two], ["strategy=single", *one], ["strategy=single", *one],
                               ["strategy=hivemind", *two]]))
    assert [(resources, [number for number, _ in group]) for resources, group in slurm_launcher.arrays(numbered)] \
        == [({"nodes": 2}, [0]), ({"nodes": 1}, [1, 2]), ({"nodes": 2}, [3])]
    launcher = compose_config("experiment=slurm", return_hydra_config=True).hydra.launcher
    assert launcher.array_parallelism == 1  # one job at a time: the planned order holds


def test_peers_of_several_hosts_listen_on_the_address_towards_the_master(monkeypatch):
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert node_network("127.0.0.1") == {"AVGBENCH_PEER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo",
                                         "TP_SOCKET_IFNAME": "lo"}
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")  # the user's choice stands
    assert node_network("127.0.0.1") == {"AVGBENCH_PEER_ADDR": "127.0.0.1"}

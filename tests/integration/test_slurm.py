"""Sweeps submitted to a real SLURM cluster through Hydra's submitit launcher (docs/clusters.md): one node, and two
nodes, each a machine of its own on the project's emulated fabric (tests/slurm_cluster.py: munged, slurmctld and one
slurmd per node, each node with its own network namespace, address and hostname). The two-node test runs the
recipe the documentation shows, as written; the fault test kills a peer, and a node's slurmd, mid-job."""
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TINY_DIGITS_BYTES
from job.process import wait_until
from metrics.recording.jsonl import read_jsonl
from slurm_cluster import SlurmCluster, doc_recipe, why_no_slurm


def as_typed(words: list[str]) -> list[str]:
    """The command as a user types it in the project's folder, with this interpreter and the project's train.py."""
    assert words[:2] == [".venv/bin/python", "train.py"], words
    return [sys.executable, str(ROOT / "train.py"), *words[2:]]


@pytest.fixture
def cluster(request):
    """A running SLURM cluster of request.param nodes; afterwards nothing of it is left."""
    reason = why_no_slurm()
    if reason:
        pytest.skip(reason)
    with SlurmCluster(request.param) as running:
        yield running


def sweep_logs(sweep: Path) -> str:
    return "\n".join(f"{p}:\n{p.read_text()[-1500:]}" for p in sorted(sweep.glob(".submitit/*/*_log.*")))


def submit(cluster: SlurmCluster, command: list[str], cwd: Path, sweep: Path, timeout: float):
    """Run a sweep on the login host to its end; an AssertionError with the jobs' logs if it does not end."""
    try:
        return cluster.run(command, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the sweep did not end within {exc.timeout} s; job logs:\n{sweep_logs(sweep)}") from exc


def node_summaries(job: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(job.glob("node*/summary.json"))}


def job_span(log_out: Path) -> tuple[str, str]:
    """When submitit started and ended a job, from its log (timestamps sort as text)."""
    stamps = re.findall(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)", log_out.read_text())
    return stamps[0], stamps[-1]


@pytest.mark.integration
@pytest.mark.timeout(180)
@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_sweep_runs_as_slurm_jobs_and_reports(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=slurm", "strategy=allreduce,single",
               "peers=2", "repeats=1", "model=tiny", "max_steps=10", "eval_every=0", "progress=false",
               "sampler.interval=0.2", "report.baselines=off", "report.control=false", f"hydra.sweep.dir={sweep}"]
    done = submit(cluster, command, tmp_path, sweep, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    jobs = sorted(sweep.glob(".submitit/*_*/*_0_log.out"))  # one SLURM array task per sweep job
    assert len(jobs) == 2 and all("Exiting after successful completion" in p.read_text() for p in jobs), jobs
    first, second = sorted(job_span(p) for p in jobs)
    assert first[1] <= second[0], f"the two runs shared the node: {first} and {second}"  # exclusive

    rows = list(csv.DictReader((sweep / "runs.csv").open()))
    assert sorted(r["config.strategy.name"] for r in rows) == ["allreduce", "single"], rows
    assert all(r["status"] == "completed" for r in rows), rows
    run_dirs = [Path(r["run_dir"]) for r in rows]  # block0/NAME, its node's folder block0/NAME/node0
    assert all(d.parents[1] == sweep and (d / "node0" / "summary.json").exists() for d in run_dirs), run_dirs
    assert not list(sweep.glob("**/baseline_*")), "with report.baselines off, the sweep runs only what was asked"
    allreduce = next(r for r in rows if r["config.strategy.name"] == "allreduce")
    assert float(allreduce["speedup_vs_single"]) > 0  # measured against the sweep's own single run
    assert (sweep / "report.html").stat().st_size > 10_000


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_documented_recipe_runs_each_job_across_two_nodes(cluster, tmp_path):
    words = doc_recipe()
    max_steps = int(next(w for w in words if w.startswith("max_steps=")).split("=")[1])
    before = {node: cluster.interface_bytes(node) for node in cluster.nodes}
    done = submit(cluster, as_typed(words), tmp_path, tmp_path / "multirun", timeout=240)
    after = {node: cluster.interface_bytes(node) for node in cluster.nodes}
    assert done.returncode == 0, done.stderr[-3000:]
    [sweep] = tmp_path.glob("multirun/*/*")  # Hydra's default sweep folder, below the directory the user typed in

    model_bytes = TINY_DIGITS_BYTES
    carried = {node: (after[node][0] - before[node][0], after[node][1] - before[node][1]) for node in cluster.nodes}
    for strategy in ("allreduce", "hivemind"):
        summaries = node_summaries(sweep / "block0" / f"strategy={strategy}")
        assert sorted(summaries) == ["node0", "node1"], sorted(summaries)
        errors = {folder: s["error"] for folder, s in summaries.items()}
        assert all(s["status"] == "completed" for s in summaries.values()), errors
        hosts = {folder: (s["shape"]["host"], s["shape"]["node_rank"]) for folder, s in summaries.items()}
        assert hosts == {"node0": ("node0", 0), "node1": ("node1", 1)}, hosts  # two machines, by their own hostnames
        ranks = {folder: sorted(p["rank"] for p in s["peers"]) for folder, s in summaries.items()}
        assert ranks == {"node0": [0, 1], "node1": [2, 3]}, ranks  # each node ran its half of the 4 peers
        # each node's interface (its namespace's counters, as its peers' sampler read them) carried the other
        # node's share: an all-reduce moves at least one model's bytes per step into and out of each half
        at_least = max_steps * model_bytes if strategy == "allreduce" else model_bytes
        for folder, summary in summaries.items():
            peer = summary["peers"][0]
            assert min(peer["net_rx_bytes"], peer["net_tx_bytes"]) >= at_least, (strategy, folder, peer, at_least)
    # the same, from the kernel's counters of each node's interface read from outside, over the whole sweep
    assert all(min(rx, tx) >= (max_steps + 1) * model_bytes for rx, tx in carried.values()), carried

    # the baselines and the control arm ran on the cluster, one process on one node, in the same block
    for job in ("baseline_4x1", "baseline_1x1", "baseline_4x1_control"):
        summaries = node_summaries(sweep / "block0" / job)
        assert list(summaries) == ["node0"], (job, list(summaries))
        shape = summaries["node0"]["shape"]
        assert shape["host"] in cluster.nodes and shape["nnodes"] == 1, (job, shape)  # not the submitting host
    rows = list(csv.DictReader((sweep / "runs.csv").open()))  # one row per run, its nodes together
    by_job = {Path(r["run_dir"]).name: r for r in rows}
    assert sorted(by_job) == ["baseline_1x1", "baseline_4x1", "baseline_4x1_control", "strategy=allreduce",
                              "strategy=hivemind"], rows
    assert all(r["status"] == "completed" and r["config.block"] == "0" for r in rows), rows
    assert [by_job[f"strategy={s}"]["hosts"] for s in ("allreduce", "hivemind")] == ["node0 node1"] * 2
    # one job at a time, in the order the plan declared
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    planned = [Path(entry["job"]).name for entry in sorted(plan["order"], key=lambda e: e["position"])]
    ran = sorted(rows, key=lambda r: float(r["started_at"]))
    assert [Path(r["run_dir"]).name for r in ran] == planned, (planned, ran)
    spans = [(float(r["started_at"]), float(r["started_at"]) + float(r["wall_s"])) for r in ran]
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    # so the report has its verdict: each configuration against the baseline, and the control arm
    verdict = (sweep / "report.md").read_text().split("## Verdict")[1].split("\n## ")[0]
    for strategy in ("allreduce", "hivemind"):
        assert f"- {strategy} 4×1cpu on 2 nodes: reached" in verdict and "; against single 4×1cpu: " in verdict
    assert "Control arm (the equal-resource baseline run twice in every block" in verdict
    # and its projection to the cluster the recipe names: each run over the two nodes read as one run, every node's
    # workers together; where 4 peers have a core each it predicts, else it refuses the run as calibration, by its CPU
    projected = (sweep / "report.md").read_text().split("\n## Projected to your cluster", 1)[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in projected.splitlines() if line.startswith("| allreduce 4×1cpu on 2 nodes")]
    if len(os.sched_getaffinity(0)) >= 4:
        assert [row[1].split(" x ")[0] for row in rows] == ["16", "64"], projected
        assert all(float(row[2]) > 0 and row[6] == "1" for row in rows), rows  # a predicted step, from the one run
    else:
        refused = projected.split("block0/strategy=allreduce: ", 1)[1].split("; multirun/")[0]
        assert rows == [] and refused.startswith("did not hold its setting, so it cannot calibrate (isolation: "), refused
        assert "sharing moved the step by" in refused, refused
        assert all(f"on host {node}" in refused for node in ("node0", "node1")), refused
    assert "single 4×1cpu against its second run: " in verdict
    # resumed in its folder, the sweep keeps every job: each node's launch.* came from SLURM's variables there
    again = submit(cluster, [*as_typed(words), f"hydra.sweep.dir={sweep}"], tmp_path, sweep, timeout=120)
    assert again.returncode == 0 and "5 of 5 runs already completed" in again.stdout, again.stdout[-3000:]
    baseline = node_summaries(sweep / "block0" / "baseline_4x1")["node0"]["shape"]
    assert baseline["fits"] == (baseline["cores"] >= 4)  # one process of 4 threads on one node
    if not baseline["fits"]:  # a node with fewer cores than 4: the caveat says so
        entry = re.search(r"^\d+\. \*\*single 4×1cpu\*\*: (.*)$", verdict, re.M)[1]
        assert "1 run oversubscribed](#" in entry, entry  # a counted caveat, linked to its detail
        assert f"single 4×1cpu: by {baseline['oversubscription']:g}×, on {baseline['cores']} cores" in \
            (sweep / "report.md").read_text()  # its detail


def steps_of(sweep: Path, job: str, node: str, rank: int) -> int:
    return len(read_jsonl(sweep / "block0" / job / node / f"peer{rank}" / "steps.jsonl"))


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_a_killed_peer_or_node_fails_its_job_by_name_and_the_sweep_goes_on(cluster, tmp_path):
    """One sweep of two jobs: in one, rank 3 (on node1) kills itself at step 10; during the other (which would train
    for ever), node1's slurmd is killed, and started again once SLURM has marked node1 down."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=slurm", "hydra.launcher.nodes=2",
               "strategy=allreduce", "peers=4", "model=tiny", "max_steps=1000000", "eval_every=0", "repeats=1",
               "progress=false", "fault.kill_peer=3,null", "report.baselines=off", "report.control=false",
               "retry_failed=false",
               f"hydra.sweep.dir={sweep}"]
    log = tmp_path / "sweep.log"
    with log.open("w") as out:
        proc = cluster.start(command, cwd=tmp_path, stdout=out)
        try:
            assert wait_until(lambda: steps_of(sweep, "fault.kill_peer=null", "node1", 2) >= 5, 150, interval=0.5), \
                sweep_logs(sweep)
            cluster.kill_slurmd("node1")
            assert cluster.wait_for_state("node1", "down", 90), cluster.states()
            cluster.start_slurmd("node1")  # as an administrator would: the node returns, the sweep's next job runs
            proc.wait(timeout=150)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"the sweep did not end; job logs:\n{sweep_logs(sweep)}") from exc
        finally:
            proc.kill()
    output = log.read_text()
    assert proc.returncode == 0, output[-3000:]

    killed = node_summaries(sweep / "block0" / "fault.kill_peer=3")
    assert killed["node1"]["status"] == "failed" and killed["node1"]["failed_rank"] == 3
    assert killed["node1"]["error"].startswith("node node1 (node rank 1 of 2): peer rank 3 was killed by SIGKILL")
    assert killed["node0"]["status"] == "failed"
    assert killed["node0"]["error"].startswith("node node0 (node rank 0 of 2)")

    assert re.search(r"avgbench: SLURM job \S+ \([^)]*fault.kill_peer=null[^)]*\) failed: SLURM ended it NODE_FAIL; "
                     r"node failure on node1 \(node rank 1\)", output), output[-3000:]
    lost = node_summaries(sweep / "block0" / "fault.kill_peer=null")
    assert lost["node0"]["status"] != "completed", lost["node0"]
    # node1's job processes, which lost their slurmd, end too (their peers lost node0's): only slurmd is left there
    assert wait_until(lambda: not cluster.job_processes("node1"), 90, interval=1), \
        [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in cluster.job_processes("node1")]

    rows = list(csv.DictReader((sweep / "runs.csv").open()))  # each job one failed run, whatever its nodes wrote
    assert sorted(Path(r["run_dir"]).name for r in rows) == ["fault.kill_peer=3", "fault.kill_peer=null"], rows
    assert all(r["status"] == "failed" for r in rows), rows
    assert all(r["error"].startswith("node node") for r in rows), rows  # the node that failed first, named
    errors = (sweep / "report.md").read_text().split("## Errors")[1]  # every node's error, each once
    assert errors.count("node node1 (node rank 1 of 2): peer rank 3 was killed by SIGKILL") == 1, errors

"""A multirun in paired blocks: its design declared before the first run (the primary figure, the comparisons, the
blocks, a Williams order, the control arm; unit tier), configurations and their baselines interleaved block by
block, and a sweep that resumes in its own directory after an interruption (integration tier: real runs of the tiny
model)."""
import csv
import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import QUICK, ROOT, compose_config, report_config

SHORT = ["max_steps=3", "eval_every=0"]


# --- the design, without a run (unit tier) ------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 8))
def test_williams_order_balances_positions_and_carry_over(n):
    from metrics.report.design import williams

    sequences = williams(n)
    assert len(sequences) == (2 * n if n % 2 and n > 1 else n) and all(sorted(s) == list(range(n)) for s in sequences)
    per_position = [sorted(s[p] for s in sequences) for p in range(n)]
    assert all(found == sorted(list(range(n)) * (len(sequences) // n)) for found in per_position)
    follows = [(a, b) for s in sequences for a, b in zip(s, s[1:])]
    expected = len(sequences) // n  # each ordered pair of different jobs adjacent this often
    assert all(follows.count(pair) == expected for pair in itertools.permutations(range(n), 2))


def planned(*jobs) -> list:
    """(name, planned run) of each (name, strategy, peers, extra config)."""
    from metrics.report.runs import planned_run

    return [(name, planned_run(report_config(strategy, peers, **extra), strategy == "single"))
            for name, strategy, peers, extra in jobs]


HEADLINE = [("strategy=allreduce", "allreduce", 2, {}), ("strategy=stepwise", "stepwise", 2, {}),
            ("baseline_2x1", "single", 2, {}), ("baseline_1x1", "single", 1, {})]


def test_the_declaration_names_the_primary_figure_and_every_comparison():
    from metrics.report.design import control_jobs, declaration

    named = planned(*HEADLINE)
    assert control_jobs([run for _, run in named]) == [2]  # the equal-resource baseline, not the one-peer one
    found = declaration(named, 3)
    assert found["primary"] == {"data=digits, model=tiny": {
        "figure": "time_to_target", "metric": "test_accuracy", "value": 0.9, "estimator": "confirmed_crossing",
        "declared": "auto"}}
    assert found["comparisons"] == {"data=digits, model=tiny": [
        ["strategy=allreduce", "baseline_2x1"], ["strategy=stepwise", "baseline_2x1"],
        ["strategy=allreduce", "strategy=stepwise"]]}
    synthetic = planned(("a", "allreduce", 2, {"data": {"name": "synthetic"}}),
                        ("b", "single", 2, {"data": {"name": "synthetic"}}))
    assert declaration(synthetic, 3)["primary"]["data=synthetic, model=tiny"]["figure"] == "throughput"
    with pytest.raises(ValueError, match="report.primary=time_to_target on synthetic data"):
        declaration(planned(("a", "allreduce", 2, {"data": {"name": "synthetic"},
                                                   "report": {"primary": "time_to_target"}})), 3)


def noise_file(tmp_path, **log_sd) -> str:
    rows = [{"figure": "time_to_target", "metric": "test_accuracy", "value": 0.9, "estimator": "confirmed_crossing",
             "data": "digits", "model": "tiny", "strategy": name, "log_sd": sd, "blocks": 3,
             "measured_at": "then", "machine": "here"} for name, sd in log_sd.items()]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"name": "primary_noise", "rows": rows}]}))
    return path


def test_repeats_auto_plans_the_blocks_from_the_recorded_noise(tmp_path):
    """The fewest blocks whose detectable ratio is x/÷1.10 after Holm over the 3 declared comparisons, at the
    noise pooled over the sweep's strategies; capped, and refused where a strategy's noise is not recorded."""
    from scipy.stats import t

    from metrics.report.design import planned_blocks

    path = noise_file(tmp_path, allreduce=0.04, stepwise=0.03)
    blocks, lines = planned_blocks(planned(*HEADLINE), path, cap=30)
    sd = ((0.04 ** 2 + 0.03 ** 2) / 2) ** 0.5

    def detects(n):  # the paired t-test's power calculation, written out
        return 2.718281828 ** ((t.ppf(1 - 0.05 / 6, n - 1) + t.ppf(0.8, n - 1)) * sd / n ** 0.5)
    assert detects(blocks) <= 1.10 < detects(blocks - 1)
    assert lines[0].startswith(f"repeats=auto: {blocks} blocks for data=digits, model=tiny: detect a ratio beyond "
                               "×/÷1.10 at 80 % power after Holm over 3 comparisons")
    assert "fixed now, no optional stopping" in lines[0]
    capped, lines = planned_blocks(planned(*HEADLINE), noise_file(tmp_path, allreduce=0.3, stepwise=0.3), cap=12)
    assert capped == 12 and "capped" in lines[0]
    with pytest.raises(ValueError, match=r"none for stepwise .*--record-noise"):
        planned_blocks(planned(*HEADLINE), noise_file(tmp_path, allreduce=0.04), cap=30)


def test_a_resumed_sweep_keeps_its_first_declaration_and_says_what_changed(tmp_path):
    from launchers.sweeper import write_plan

    first = {"primary": {"s": {"figure": "time_to_target"}}, "comparisons": {"s": [["a", "b"]]}, "blocks": 3,
             "order": {"sequences": 2}}
    earlier = {"declaration": first, "reruns": [{"job": "block0/a", "attempts": ["superseded/t0/block0/a"]}]}
    plan = write_plan(tmp_path, [], ["block0/b"], first | {"blocks": 5}, [], {"block1/a": "superseded/t1/block1/a"},
                      earlier)
    assert plan["declaration"] == first and plan["redeclared"]["blocks"] == 5
    assert plan["changed"] == "this sweep's plan differs from the one its first runs were made under in blocks"
    assert plan["reruns"] == [{"job": "block0/a", "attempts": ["superseded/t0/block0/a"]},
                              {"job": "block1/a", "attempts": ["superseded/t1/block1/a"]}]
    same = write_plan(tmp_path, [], ["block0/b"], first, [], {}, earlier)
    assert "changed" not in same and same["declaration"] == first
    resolved = {"s": {"figure": "time_to_target", "declared": "time_to_target"}}  # auto, now asked for by name
    assert "changed" not in write_plan(tmp_path, [], ["block0/b"], first | {"primary": resolved}, [], {}, earlier)
    assert json.loads((tmp_path / ".avgbench" / "sweep.json").read_text()) == same


def write_node_summary(job: Path, node: int, config: dict, status: str = "completed") -> None:
    """Node `node`'s summary of a SLURM job over 2 nodes: the config as the node resolved it (launch.* from SLURM's
    variables there)."""
    launch = config["launch"] | {"nnodes": 2, "node_rank": node, "master_addr": "10.213.7.2"}
    (job / f"node{node}").mkdir(parents=True)
    (job / f"node{node}" / "summary.json").write_text(json.dumps(
        {"status": status, "config": config | {"launch": launch}, "target": config["target"], "peers": []}))


def test_a_sweep_keeps_a_job_only_where_every_node_completed_it(tmp_path, monkeypatch):
    """The submitting host composes launch.nnodes=1, node_rank=0, master_addr=127.0.0.1 (no SLURM variables
    there): a job completed on both nodes is kept; one whose node 1 failed or wrote nothing, one made on another
    number of nodes, or with another setting, runs again."""
    from omegaconf import OmegaConf

    from launchers.sweeper import completed_with

    for name in ("SLURM_NNODES", "SLURM_NODEID", "SLURM_LAUNCH_NODE_IPADDR"):
        monkeypatch.delenv(name, raising=False)
    cfg = compose_config("experiment=slurm", "strategy=allreduce", "peers=4", "model=tiny", "max_steps=20")
    recorded = OmegaConf.to_container(cfg, resolve=True) | {"device": "cpu"}
    assert recorded["launch"] == {"nnodes": 1, "node_rank": 0, "master_addr": "127.0.0.1", "master_port": 29500,
                                  "hostfile": None}
    done, failed, lost, other = (tmp_path / name for name in ("done", "failed", "lost", "other"))
    for job in (done, failed, lost):
        write_node_summary(job, 0, recorded)
    write_node_summary(done, 1, recorded)
    write_node_summary(failed, 1, recorded, status="failed")
    write_node_summary(other, 0, recorded | {"max_steps": 40})
    write_node_summary(other, 1, recorded | {"max_steps": 40})
    assert completed_with(done, cfg, nodes=2)
    assert not completed_with(failed, cfg, nodes=2) and not completed_with(lost, cfg, nodes=2)
    assert not completed_with(done, cfg, nodes=1)  # asked for one node now
    assert not completed_with(other, cfg, nodes=2)


# --- real sweeps (integration tier) -------------------------------------------------------------


def multirun(sweep, *overrides) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "-m", f"hydra.sweep.dir={sweep}", *QUICK, *SHORT, *overrides]


def runs_of(sweep) -> list[dict]:
    with open(sweep / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_repeats_interleave_configurations_and_baselines_in_blocks(tmp_path):
    from metrics.report.design import williams

    sweep = tmp_path / "sweep"
    # stepwise on 2 peers needs two baselines: single on the same 2 CPUs (run twice: the control arm) and on 1 CPU
    done = subprocess.run(multirun(sweep, "strategy=stepwise,allreduce", "peers=2", "repeats=2", "seed=5"),
                          cwd=ROOT, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    # the design comes first, before any run
    first = done.stdout.splitlines()[:3]
    assert first[0] == ("avgbench: primary figure of data=digits, model=tiny, fixed before the first run (the verdict "
                        "ranks and claims on it alone): time-to-target (test_accuracy ≥ 0.95, estimator "
                        "isotonic; seconds of training)")
    assert first[1] == ("avgbench: 2 blocks of 5 jobs (control arm: baseline_2x1_control), in a Williams order of 10 "
                        "sequences (not balanced: a multiple of 10 blocks would be); 3 comparisons declared, "
                        "Holm-corrected per (dataset, model)")
    rows = sorted(runs_of(sweep), key=lambda r: float(r["started_at"]))
    assert all(r["status"] == "completed" for r in rows)
    jobs = [(r["config.block"], r["config.strategy.name"], r["config.peers"], r["config.peer_cpus"], r["arm"])
            for r in rows]
    every = {("stepwise", "2", "1", ""), ("allreduce", "2", "1", ""), ("single", "2", "1", ""),
             ("single", "2", "1", "control"), ("single", "1", "1", "")}
    # in start order: block 0 holds one run of every job, then block 1 does (baselines among them, not after)
    assert [j[0] for j in jobs] == ["0"] * 5 + ["1"] * 5
    assert {j[1:] for j in jobs[:5]} == every == {j[1:] for j in jobs[5:]}
    assert {(r["config.block"], r["config.seed"]) for r in rows} == {("0", "5"), ("1", "6")}  # seed + block
    assert sorted(p.relative_to(sweep).as_posix() for p in sweep.glob("block*/*")) == [
        f"block{b}/{name}" for b in (0, 1)
        for name in ("baseline_1x1", "baseline_2x1", "baseline_2x1_control", "strategy=allreduce",
                     "strategy=stepwise")]
    # the plan's order: block B follows sequence B of a Williams design, recorded in runs.csv
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    order = [next(o for o in job if o.startswith("hydra.sweep.subdir")) for job in plan["jobs"]]
    assert [row["run_dir"] for row in rows] == [str(sweep / o.split("'")[1]) for o in order]
    names = ["strategy=stepwise", "strategy=allreduce", "baseline_2x1", "baseline_1x1", "baseline_2x1_control"]
    for block in (0, 1):
        placed = sorted((r["order.position"], Path(r["run_dir"]).name) for r in rows if r["config.block"] == str(block))
        assert [name for _, name in placed] == [names[i] for i in williams(5)[block]]
    assert plan["declaration"]["comparisons"] == {"data=digits, model=tiny": [
        ["strategy=allreduce", "baseline_2x1"], ["strategy=stepwise", "baseline_2x1"],
        ["strategy=allreduce", "strategy=stepwise"]]}
    verdict = (sweep / "report.md").read_text().split("## Verdict")[1]
    assert "Primary figure (declared before the first run): time-to-target" in verdict
    assert "reached test_accuracy ≥ 0.95 in" in verdict and "2 blocks" in verdict


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_repeats_auto_without_recorded_noise_is_refused_before_any_run(tmp_path):
    sweep = tmp_path / "sweep"
    refused = subprocess.run(multirun(sweep, "strategy=allreduce", "peers=2", "repeats=auto",
                                      f"report.noise_results={tmp_path / 'results.json'}"),
                             cwd=ROOT, capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert (f"avgbench: error: repeats=auto plans the blocks from the primary figure's noise recorded in "
            f"{tmp_path / 'results.json'} (primary_noise), which has none for allreduce") in refused.stderr
    assert "--record-noise" in refused.stderr and not sweep.exists()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_an_interrupted_sweep_resumes_in_its_directory(tmp_path):
    sweep = tmp_path / "sweep"
    command = multirun(sweep, "strategy=single", "peers=1", "repeats=3", "max_steps=15")
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 150
    while not list(sweep.glob("block*/*/summary.json")):
        assert first.poll() is None and time.monotonic() < deadline, "the first job did not finish"
        time.sleep(0.2)
    while not (sweep / "block1" / "strategy=single" / ".avgbench" / "run_id").exists():
        assert first.poll() is None and time.monotonic() < deadline, "the second job did not start"
        time.sleep(0.1)
    first.send_signal(signal.SIGINT)  # Ctrl-C during the second job
    first.communicate(timeout=60)
    assert first.returncode != 0
    done = sweep / "block0" / "strategy=single"
    kept_id = (done / ".avgbench" / "run_id").read_text()

    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 of 3 runs already completed" in again.stdout
    assert (done / ".avgbench" / "run_id").read_text() == kept_id  # kept, not rerun
    rows = runs_of(sweep)
    current = [r for r in rows if r["attempt"] != "superseded"]
    assert sorted(r["config.block"] for r in current) == ["0", "1", "2"]
    assert all(r["status"] == "completed" for r in current)
    # the interrupted attempt is kept aside and stays in the report; the rerun keeps its block, marked as run later
    (aside,) = sweep.glob("superseded/*/block1/strategy=single")
    assert json.loads((aside / "summary.json").read_text())["status"] == "interrupted"
    (attempt,) = [r for r in rows if r["attempt"] == "superseded"]
    assert (attempt["config.block"], attempt["status"], attempt["run_dir"]) == ("1", "interrupted", str(aside))
    assert next(r for r in current if r["config.block"] == "1")["attempt"] == "run later"
    plan = json.loads((sweep / ".avgbench" / "sweep.json").read_text())
    assert plan["reruns"] == [{"job": "block1/strategy=single", "attempts": [aside.relative_to(sweep).as_posix()]}]

"""A multirun in paired blocks: its design declared before the first run (the primary figure, the comparisons, the
blocks, a Williams order, the control arm; unit tier), configurations and their baselines interleaved block by
block, and a sweep that resumes in its own directory after an interruption (integration tier: real runs of the tiny
model)."""
import itertools
import json
from pathlib import Path

import pytest

from helpers import compose_config, report_config
from metrics.recording.machine import fingerprint


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
             "measured_at": "then", "machine": fingerprint()} for name, sd in log_sd.items()]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"name": "primary_noise", "rows": rows}]}))
    return path


def test_repeats_auto_plans_the_blocks_from_the_upper_bound_of_the_recorded_noise(tmp_path):
    """The fewest blocks whose detectable ratio is the smallest effect of interest after Holm over the 3 declared
    comparisons, at the 95 % chi-square upper bound of the noise pooled over the sweep's strategies (2 rows of 3
    blocks: 4 degrees of freedom); capped, and refused where a strategy's noise is not recorded."""
    import numpy as np
    from scipy.stats import chi2, t

    from metrics.report.design import planned_blocks

    path = noise_file(tmp_path, allreduce=0.04, stepwise=0.03)
    blocks, lines, powers = planned_blocks(planned(*HEADLINE), path, effect=1.10, cap=30)
    sd = ((0.04 ** 2 + 0.03 ** 2) / 2) ** 0.5
    upper = sd * (4 / chi2.ppf(0.05, 4)) ** 0.5
    assert 2.36 < upper / sd < 2.38  # the bound of an sd on 4 degrees of freedom: sqrt(4 / 0.711)

    def rejects(n):  # the share of simulated paired t-tests over n blocks at that noise that detect x/÷1.10
        logs = np.random.default_rng(n).normal(np.log(1.10), upper, size=(20000, n))
        statistic = logs.mean(axis=1) / (logs.std(axis=1, ddof=1) / n ** 0.5)
        return np.mean(np.abs(statistic) > t.ppf(1 - 0.05 / 3 / 2, n - 1))
    assert rejects(blocks) > 0.79 and rejects(blocks - 1) < 0.81
    section = powers["data=digits, model=tiny"]
    assert section["blocks"] == blocks and section["df"] == 4 and section["power"] >= 0.8
    assert section["power_at_estimate"] > section["power"]
    assert lines[0].startswith(f"avgbench: repeats=auto: {blocks} blocks for data=digits, model=tiny: "
                               f"{section['power']:.0%} power to detect a ratio beyond ×/÷1.10")
    assert "fixed now, no optional stopping" in lines[0] and f"log-sd {upper:.3f}" in lines[0]
    capped, lines, _ = planned_blocks(planned(*HEADLINE), noise_file(tmp_path, allreduce=0.3, stepwise=0.3),
                                      effect=1.10, cap=12)
    assert capped == 12 and "capped" in lines[0]
    with pytest.raises(ValueError, match=r"none for stepwise .*bench/primary_noise.py multirun/noise"):
        planned_blocks(planned(*HEADLINE), noise_file(tmp_path, allreduce=0.04), effect=1.10, cap=30)


def test_the_plan_takes_the_noise_of_the_machine_that_runs_it(tmp_path):
    """Rows from a quiet machine and a noisy one: each plans from its own rows; without a machine (the docs'
    statement), every row is pooled."""
    from metrics.report.design import planned_blocks

    quiet, noisy, other = ({**fingerprint(), "cpu_model": model} for model in ("quiet", "noisy", "other"))
    rows = [{"figure": "time_to_target", "metric": "test_accuracy", "value": 0.9, "estimator": "confirmed_crossing",
             "data": "digits", "model": "tiny", "strategy": name, "log_sd": sd, "blocks": 3, "measured_at": "then",
             "machine": machine} for machine, sd in ((quiet, 0.02), (noisy, 0.15)) for name in ("allreduce", "stepwise")]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"name": "primary_noise", "rows": rows}]}))

    def planned_noise(machine):
        _, lines, powers = planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=30, repeats=3, machine=machine)
        return powers["data=digits, model=tiny"]["log_sd"], lines[0]

    sd, line = planned_noise(quiet)
    assert sd == pytest.approx(0.02) and "the noise recorded on the machine planned for" in line
    assert "conservative prior" not in line
    assert planned_noise(noisy)[0] == pytest.approx(0.15)
    pooled, _ = planned_noise(None)  # no machine given (the docs' statement): every row
    assert pooled == pytest.approx(((0.02 ** 2 + 0.15 ** 2) / 2) ** 0.5)


def machines_rows(tmp_path, **log_sds) -> tuple[Path, dict]:
    """An evidence file of rows (allreduce and stepwise) measured on machines named by their cpu_model, at these
    log-sds; and their fingerprints."""
    machines = {name: {**fingerprint(), "cpu_model": name} for name in log_sds}
    rows = [{"figure": "time_to_target", "metric": "test_accuracy", "value": 0.9, "estimator": "confirmed_crossing",
             "data": "digits", "model": "tiny", "strategy": strategy, "log_sd": sd, "blocks": 3, "measured_at": "then",
             "machine": machines[name]} for name, sd in log_sds.items() for strategy in ("allreduce", "stepwise")]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"name": "primary_noise", "rows": rows}]}))
    return path, machines


def test_off_its_machine_the_plan_takes_a_conservative_prior_and_says_so(tmp_path):
    """A machine with no noise rows of its own plans on the prior: 2.5 x the noisiest row recorded on any machine
    (0.15 -> 0.375), taken as its bound, never on a quieter machine's rows; its first line and its plan
    (declaration.power) say "conservative prior", and it needs more blocks than the noisy machine's own plan."""
    from metrics.report.design import planned_blocks

    path, machines = machines_rows(tmp_path, quiet=0.02, noisy=0.15)
    other = {**fingerprint(), "cpu_model": "other"}
    blocks, lines, powers = planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=100, machine=other)
    section = powers["data=digits, model=tiny"]
    assert section["log_sd"] == section["log_sd_upper"] == pytest.approx(0.375) and section["df"] == 2
    assert section["noise"] == "conservative prior" and "conservative prior" in lines[0]
    own, _, mine = planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=100, machine=machines["noisy"])
    assert mine["data=digits, model=tiny"]["noise"] == "own machine" and blocks > own


def test_a_sweeps_measured_noise_is_the_next_plans_row_on_its_machine(tmp_path):
    """A sweep's report writes its paired noise as candidate rows of its machine (.avgbench/primary_noise.json);
    the next sweep beside it on that machine plans on the newest such rows, not on a prior from other machines."""
    import math
    import statistics

    from helpers import report_of, write_sweep
    from metrics.report.design import planned_blocks
    from metrics.report.noise import sweep_noise_files

    path, _ = machines_rows(tmp_path, noisy=0.15)
    base = [10.0, 11.0, 10.5]
    ratios = {"allreduce": [1.30, 0.95, 1.10], "stepwise": [1.05, 0.90, 1.20]}
    sweep = write_sweep(tmp_path / "sweeps" / "first", {
        f"strategy={name}": [(name, 2, 1, 100.0, b / r, {}) for b, r in zip(base, found)]
        for name, found in ratios.items()} | {"baseline_2x1": [("single", 2, 1, 100.0, b, {}) for b in base],
                                                "baseline_1x1": [("single", 1, 1, 60.0, 15.0, {})] * 3})
    report_of(sweep, out=sweep)
    written = json.loads((sweep / ".avgbench" / "primary_noise.json").read_text())["rows"]
    assert {r["strategy"] for r in written} == {"allreduce", "stepwise"}
    older = tmp_path / "sweeps" / "older" / ".avgbench" / "primary_noise.json"
    older.parent.mkdir(parents=True)
    older.write_text(json.dumps({"rows": [r | {"log_sd": 0.9, "measured_at": "2000-01-01 00:00:00"}
                                          for r in written]}))
    files = sweep_noise_files(tmp_path / "sweeps" / "next")
    assert sorted(files) == sorted([sweep / ".avgbench" / "primary_noise.json", older])
    dated = tmp_path / "multirun" / "2026-12-07" / "10-00-00" / ".avgbench" / "primary_noise.json"
    dated.parent.mkdir(parents=True)
    dated.write_text(older.read_text())
    assert sweep_noise_files(tmp_path / "multirun" / "2026-12-08" / "09-00-00") == [dated]  # Hydra's dated layout
    assert sweep_noise_files(tmp_path / "multirun" / "next") == []  # a named sweep: only its siblings, not the root's
    _, lines, powers = planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=30, machine=fingerprint(),
                                      sweeps=files)
    sds = [statistics.stdev(math.log(r) for r in found) for found in ratios.values()]
    section = powers["data=digits, model=tiny"]
    assert section["noise"] == "own machine" and section["df"] == 4
    assert section["log_sd"] == pytest.approx(math.sqrt(sum(sd * sd for sd in sds) / 2))
    assert str(sweep) in lines[0]


def test_a_target_missed_on_another_machine_does_not_stop_a_plan_from_this_machines_rows(tmp_path):
    """This machine's rows cover every strategy: it plans from them, whatever another machine missed; a machine with
    no rows of its own takes each strategy's worst row, and a missed one is the worst: no noise to plan from."""
    from metrics.report.design import planned_blocks

    here, elsewhere, other = ({**fingerprint(), "cpu_model": model} for model in ("here", "elsewhere", "other"))
    rows = [{"figure": "time_to_target", "metric": "test_accuracy", "value": 0.9, "estimator": "confirmed_crossing",
             "data": "digits", "model": "tiny", "strategy": name, "log_sd": sd, "blocks": 3, "measured_at": "then",
             "machine": machine, "reached": 3 if sd else 1, "compared": 3, "sweeps": ["multirun/x"]}
            for machine, sd in ((here, 0.03), (elsewhere, None)) for name in ("allreduce", "stepwise")]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": [{"name": "primary_noise", "rows": rows}]}))
    _, _, powers = planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=30, machine=here)  # repeats=auto
    assert powers["data=digits, model=tiny"]["log_sd"] == pytest.approx(0.03)
    with pytest.raises(ValueError, match="reached .* in 1 of the 3 blocks compared .*no noise to plan from"):
        planned_blocks(planned(*HEADLINE), path, effect=1.25, cap=30, machine=other)


def test_blocks_given_by_hand_state_their_power(tmp_path):
    """repeats=3 keeps 3 blocks and states their power at the smallest effect; unknown without recorded noise."""
    from metrics.report.design import planned_blocks

    blocks, lines, powers = planned_blocks(planned(*HEADLINE), noise_file(tmp_path, allreduce=0.13, stepwise=0.13),
                                           effect=1.25, cap=30, repeats=3)
    assert blocks == 2  # nothing more asked of repeats=auto: the sweep runs its 3
    section = powers["data=digits, model=tiny"]
    assert section["blocks"] == 3 and section["power"] < 0.2  # 3 blocks at the headline's noise: far below 80 %
    assert lines[0].startswith("avgbench: 3 blocks for data=digits, model=tiny: ")
    _, lines, powers = planned_blocks(planned(*HEADLINE), tmp_path / "none.json", effect=1.25, cap=30, repeats=3)
    assert powers == {} and "is unknown" in lines[0]


@pytest.mark.timeout(60)
def test_power_matches_simulated_paired_t_tests():
    """stats.power against the share of simulated paired t-tests (log ratios Normal(log 1.25, 0.12), 8 blocks,
    alpha 0.05 split over 6 comparisons) that reject."""
    import numpy as np
    from scipy.stats import t

    from metrics.report.stats import power

    rng = np.random.default_rng(7)
    logs = rng.normal(np.log(1.25), 0.12, size=(40000, 8))
    statistic = logs.mean(axis=1) / (logs.std(axis=1, ddof=1) / 8 ** 0.5)
    rejected = np.mean(np.abs(statistic) > t.ppf(1 - 0.05 / 6 / 2, 7))
    assert abs(power(0.12, 8, 1.25, 6) - rejected) < 0.01
    found = [power(0.13, n, 1.25, 6) for n in range(2, 41)]  # deep in the tail too: a number, rising to 1
    assert all(0 <= a <= b <= 1 for a, b in zip(found, found[1:])) and found[-1] > 0.999


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


def test_each_command_that_runs_a_sweep_adds_its_span_to_the_plans_elapsed_time(tmp_path):
    from launchers.sweeper import record_elapsed, write_plan

    design = {"primary": {}, "comparisons": {}, "blocks": 1, "order": {"sequences": 1}}
    write_plan(tmp_path, [], [], design, [], {}, {})
    record_elapsed(tmp_path, 1000.0, 1060.0)
    resumed = json.loads((tmp_path / ".avgbench" / "sweep.json").read_text())
    write_plan(tmp_path, [], ["block0/a"], design, [], {}, resumed)  # the same command again: its runs kept
    record_elapsed(tmp_path, 2000.0, 2040.0)
    assert json.loads((tmp_path / ".avgbench" / "sweep.json").read_text())["elapsed"] == [
        {"started_at": 1000.0, "ended_at": 1060.0}, {"started_at": 2000.0, "ended_at": 2040.0}]


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

"""The published cases of bench/field.py: a well-formed table, predictions equal to the command line's own output
for the same arguments, hand-worked predictions of a case of each kind, and the goal arithmetic. No process is
launched (hand-written run directories)."""
import json

import pytest

from bench.field import CASES, SOURCES, Case, cli_arguments, judged, predicted_row, rankings, summarize
from helpers import strategy_names, validation_case, write_results, write_run
from metrics.projection.evidence import load_evidence
from metrics.projection.project import main

pytestmark = pytest.mark.timeout(60)


def test_the_case_table_is_well_formed():
    assert len({c.source for c in CASES}) >= 2 and len(CASES) >= 3
    for case in CASES:
        assert case.source in SOURCES and case.strategy in strategy_names()
        assert case.peers >= 16 and case.peers % case.gpus_per_node == 0
        assert min(case.link_mbit, case.batch, case.compute_s, case.parameters, case.published) > 0
        assert case.where and case.compute_from and case.parameters_from
        assert case.published < (100 if case.figure == "efficiency" else case.compute_s * 10)
        if case.figure == "step_s":  # a published step at N is never shorter than one device's step
            assert case.published >= case.compute_s
        assert case.intra_node_mbit > case.link_mbit or case.gpus_per_node == 1  # a node's devices: a faster link
        assert (case.ps_servers is not None) == (case.strategy == "ps")
        if case.ps_placement == "colocated":  # one server on each of as many nodes
            assert case.ps_servers <= case.peers // case.gpus_per_node
    for source in SOURCES.values():
        assert source["figure"] in ("step_s", "efficiency") and source["citation"] and source["hardware"]
    assert len({(c.source, c.model, c.peers, c.batch) for c in CASES}) == len(CASES)  # no case twice


def structural_runs(tmp_path) -> dict:
    """An allreduce (DDP), a ring and a sync ps run of 2 workers on 20 Mbit/s, P = 1 MB per round, batch 32; the ring
    run measured 0.01 s of communication behind backward per step; the ps run's one server updated 6 times in 0.3 s
    (u = 0.05 s) and its steps (1.85 s against 2.1 s without overlap) fit an overlap of 0.5 (as in test_projection)."""
    write_run(tmp_path / "allreduce", "strategies.allreduce:AllReduce", {"transport": "gloo", "ddp": True},
              workers=2, payload=1_000_000, mbit=20, train_s=[1.0, 1.7, 2.4, 3.1])
    write_run(tmp_path / "ring", "strategies.ring:Ring", {"backward_passes_per_step": 1}, workers=2,
              payload=1_000_000, mbit=20, train_s=[1.0, 1.7, 2.4, 3.1], step={"hidden_comm_s": 0.01})
    write_run(tmp_path / "ps", "strategies.ps:ParameterServer", {"transport": "gloo", "servers": 1, "mode": "sync"},
              workers=2, payload=1_000_000, mbit=20, train_s=[2.0, 3.85, 5.7, 7.55])
    (tmp_path / "ps" / "peer2").mkdir()
    (tmp_path / "ps" / "peer2" / "result.json").write_text(json.dumps({"strategy": {"role": "server", "opt_s": 0.3,
                                                                                    "updates": 6}}))
    return {name: tmp_path / name for name in ("allreduce", "ring", "ps")}


def evidence_for(tmp_path, strategy: str, share: float = 0.9):
    """The payload share; the strategy validated at N=4 and 8 (20 Mbit/s)."""
    return load_evidence(write_results(tmp_path / "results.json", [validation_case(strategy, 4, 0.05),
                                                                   validation_case(strategy, 8, -0.05)], share))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.strategy}-{c.model}-{c.peers}-{c.batch}")
def test_each_prediction_is_the_command_lines_own(tmp_path, case):
    runs = structural_runs(tmp_path)
    evidence_file = write_results(tmp_path / "results.json", [validation_case(case.strategy, 4, 0.05),
                                                              validation_case(case.strategy, 8, -0.05)], 0.9)
    row = predicted_row(case, runs[case.strategy], load_evidence(evidence_file))
    out = tmp_path / "out"
    assert main([str(runs[case.strategy]), *cli_arguments(case), "--evidence", str(evidence_file), "-o", str(out)]) == 0
    cli = json.loads((out / "projection.json").read_text())["runs"][0]
    compute_of = cli["measured"]["compute_of"]
    assert compute_of.startswith("declared by you") and compute_of.endswith(f"at batch {case.batch}")
    assert [r["step_s"] for r in cli["projections"][0]["rows"]] == [pytest.approx(row["step_s"], rel=1e-12)]
    link = cli["projections"][0]["link"]
    assert (link["mbit"], link["devices_per_node"], link["ps_servers"]) == (case.link_mbit, case.gpus_per_node,
                                                                             case.ps_servers)


def test_declared_compute_is_read_at_the_cases_batch(tmp_path):
    """A batch-64 case: its compute is one device's step at 64 samples, not at the structural run's 32, so its
    throughput is N x 64 samples per predicted step, and the command line is given that batch."""
    case = next(c for c in CASES if c.batch == 64)
    row = predicted_row(case, structural_runs(tmp_path)[case.strategy], evidence_for(tmp_path, case.strategy))
    assert row["throughput_samples_per_s"] == pytest.approx(case.peers * 64 / row["step_s"])
    arguments = cli_arguments(case)
    assert arguments[arguments.index("--batch") + 1] == "64"


def test_a_multi_device_node_prediction_by_hand(tmp_path):
    """resnet50 at N=16 as 2 nodes of 8 V100s (DDP), 400 Gbit/s between nodes, NVLink 1,200,000 Mbit/s inside one,
    payload share 0.9 (the intra-node link: all payload), no hidden communication (the allreduce run logs none):
    S = 25,557,032 x 4 = 102.228128 MB; across M = 2 nodes 2(M-1)/M S/β = S / (50 GB/s x 0.9) = 2.27174 ms; inside a
    node 2(D-1) S/(D β') = 1.75 x 102.228128 MB / 150 GB/s = 1.19266 ms; 0.097 + 0.0034644 = 0.1004644 s. (The flat
    ring of 16 on the node's link: 0.097 + 2 x 15/16 x 2.27174 ms = 0.1012595 s.)"""
    case = next(c for c in CASES if c.model == "resnet50" and c.strategy == "allreduce")
    assert case.gradient_mb == pytest.approx(102.228128)
    row = predicted_row(case, structural_runs(tmp_path)["allreduce"], evidence_for(tmp_path, "allreduce"))
    assert row["step_s"] == pytest.approx(0.1004644, rel=1e-6)
    assert judged(case, row["step_s"])["error"] == pytest.approx(0.1004644 / 0.104 - 1, rel=1e-5)
    assert row["unvalidated"]  # N = 16 > the validated N = 8, nodes of several devices


def test_a_parameter_server_prediction_by_hand(tmp_path):
    """resnet152 at N=64, batch 32: 8 p2.8xlarge of 8 GPUs, 4 co-located servers, 10 Gbit/s x 0.8 = 1 GB/s between
    nodes, PCIe 126,000 Mbit/s = 15.75 GB/s inside one. S = 60,192,808 x 4 = 240.771232 MB, S/β = 0.2407712 s.
    Co-located: R = M - 1 = 7 remote pushes per server, L = (k-1)/k = 3/4 of a node's sum crosses its link: node
    2L S/β = 0.3611568 s; a server's in-cast and replies (2R - φ(R-1)) S/(kβ) = (14 - 0.5 x 6) / 4 x 0.2407712 =
    0.6621209 s (φ = 0.5, the run's at payload share 0.8); the longer: 0.6621209 s. Inside a node 2(D-1) S/(D β') =
    1.75 x 240.771232 MB / 15.75 GB/s = 0.0267524 s. u = 0.05 s x 1 server / 4 = 0.0125 s. Compute 32 / 19.4 =
    1.6494845 s. Step 1.6494845 + 0.0125 + 0.0267524 + 0.6621209 = 2.3508578 s: efficiency 70.17 %, published
    981 / (64 x 19.4) = 79.01 %."""
    case = next(c for c in CASES if c.model == "resnet152" and c.peers == 64)
    assert (case.ps_servers, case.ps_placement, case.gpus_per_node) == (4, "colocated", 8)
    row = predicted_row(case, structural_runs(tmp_path)["ps"], evidence_for(tmp_path, "ps", share=0.8))
    assert row["step_s"] == pytest.approx(2.3508578, rel=1e-6)
    assert judged(case, row["step_s"])["predicted"] == pytest.approx(70.17, abs=0.01)
    assert case.published == pytest.approx(79.01, abs=0.01)


def efficiency_case(published: float, model: str = "m") -> Case:
    return Case("horovod_benchmarks", "here", model, "ring", 128, 4, 25_000, 64, 0.5, "x", 1e6, "y", published)


def test_goals_in_points_of_efficiency_and_in_step_time():
    assert judged(efficiency_case(90.0), 0.5 / 0.8) == {"predicted": pytest.approx(80.0), "error": pytest.approx(-10.0),
                                                        "within_goal": True}
    assert not judged(efficiency_case(90.0), 0.5 / 0.79)["within_goal"]  # 79 %: 11 points below
    step = Case("pytorch_ddp_benchmark", "here", "m", "allreduce", 16, 8, 1, 32, 0.1, "x", 1e6, "y", 0.2)
    assert judged(step, 0.23)["within_goal"] and not judged(step, 0.231)["within_goal"]
    assert judged(step, None) == {"predicted": None, "error": None, "within_goal": False}


def test_rankings_count_pairs_of_one_source_with_different_published_figures():
    rows = [{"source": "a", "label": "x", "published": 90, "predicted": 80},
            {"source": "a", "label": "y", "published": 90, "predicted": 70},   # a tie in the source: no ranking
            {"source": "a", "label": "z", "published": 68, "predicted": 75},   # kept against x, not against y
            {"source": "b", "label": "w", "published": 10, "predicted": 1}]    # another source: never paired
    pairs = rankings(rows)
    assert [(p["pair"], p["preserved"]) for p in pairs] == [(["x", "z"], True), (["y", "z"], False)]


def test_the_goal_needs_the_share_and_every_ranking():
    rows = [{"source": "pytorch_ddp_benchmark", "label": str(i), "published": i, "predicted": i,
             "within_goal": i < 4} for i in range(5)]
    assert summarize(rows)["share_within_goal"] == 0.8 and summarize(rows)["goal_met"]
    rows[0]["predicted"] = 9  # its order against every other case flips
    assert not summarize(rows)["goal_met"] and not summarize(rows)["every_ranking_preserved"]

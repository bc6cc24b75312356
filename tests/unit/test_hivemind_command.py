"""bench/hivemind_command.py reads the hivemind command's run from its own records, and the README's row says what
the runs reached and whether they held, from that entry."""
import json

from bench.hivemind_command import figures
from bench.results import COMMIT, BenchResult
from docs.generate import hivemind_elapsed


def write_run(path):
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "status": "completed", "error": None, "wall_s": 1100.0, "time_to_target_s": None,
        "target": {"metric": "test_accuracy", "value": 0.95, "estimator": "confirmed_crossing"},
        "accuracy_by_worker": {"mean": 0.944, "worst": 0.942, "best": 0.946},
        "averaging_rounds": {"rounds": [{"kind": "gradients"}] * 5, "failed": 1},
        "shape": {"peers": 8, "processes": 8, "cores": 2, "oversubscription": 4.0},
        "isolation": {"faithful": False, "unfaithful": ["rank 3 received 22% of its promised CPU"]},
        "evaluation": {"after_training_s": 300.0, "evaluations": 26, "test_samples": 359},
        "machine": {"alone": True, "other_cpu_share": 0.01}}))
    peer = path / "peer0"
    peer.mkdir()
    (peer / "steps.jsonl").write_text(json.dumps({"step": 1, "train_s": 700.0}) + "\n")
    (peer / "eval.jsonl").write_text("")


def test_the_commands_figures_and_its_row(tmp_path):
    write_run(tmp_path / "run")
    found = figures(tmp_path / "run", command_s=1200.0)
    assert (found["worst_accuracy"], found["averaging_rounds"], found["failed_rounds"]) == (0.942, 5, 1)
    assert found["unfaithful"] == ["isolation: rank 3 received 22% of its promised CPU"]
    machine = {"vendor": "AuthenticAMD", "model_name": "AMD EPYC", "cores": 2}
    head = {"sha": COMMIT["sha"], "dirty": False} if COMMIT else None  # made by HEAD's code: shown
    entry = {"name": "hivemind_command", "goal": "", "sweeps": [], "repeats": [found], "commit": head,
             "measured_at": "2026-12-02 19:00:00", "machine": machine}
    row = hivemind_elapsed(BenchResult.of(entry))
    assert row.startswith("20.0 min, 1 run (worst worker 0.942, target not reached; 8 peers oversubscribed 4x on 2 "
                          "cores: unfaithful; 2026-12-02 19:00:00")
    assert hivemind_elapsed(None) == "not recorded (`python bench/hivemind_command.py`)"

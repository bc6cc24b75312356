"""The run directory layout (unit tier): one definition of every path, peers in rank order."""
import pytest

from metrics.recording.rundir import PeerDir, RunDir, run_dirs_under, started_runs_under

pytestmark = pytest.mark.timeout(30)


def test_paths(tmp_path):
    run = RunDir(tmp_path / "r")
    assert run.summary == tmp_path / "r" / "summary.json"
    assert run.launcher_log == tmp_path / "r" / "launcher.log"
    private = tmp_path / "r" / ".avgbench"
    assert (run.config, run.launch_spec, run.run_id, run.network, run.hostfile) == (
        private / "config.yaml", private / "launch.json", private / "run_id", private / "network.json",
        private / "hostfile")
    assert run.file("hivemind_maddrs") == private / "hivemind_maddrs"
    peer = run.peer(12)
    assert peer.rank == 12 and peer.path == tmp_path / "r" / "peer12"
    assert (peer.steps, peer.evals, peer.resources, peer.result, peer.output_log, peer.error, peer.fault) == tuple(
        tmp_path / "r" / "peer12" / name for name in ("steps.jsonl", "eval.jsonl", "resources.jsonl", "result.json",
                                                      "output.log", "error.txt", "fault.json"))
    assert peer.file("hivemind_epochs.jsonl") == tmp_path / "r" / "peer12" / "hivemind_epochs.jsonl"


def test_peers_are_in_numeric_rank_order(tmp_path):
    run = RunDir(tmp_path)
    for name in ("peer10", "peer2", "peer0", "peer1", "peers", "peerX", "other"):
        (tmp_path / name).mkdir()
    assert [p.rank for p in run.peers()] == [0, 1, 2, 10]  # peer10 after peer2; peers/peerX are no peers
    assert all(isinstance(p, PeerDir) for p in run.peers())


def test_errors_are_the_peers_error_files(tmp_path):
    run = RunDir(tmp_path)
    for rank in (3, 1, 0):
        run.peer(rank).path.mkdir()
    run.peer(3).error.write_text("x")
    run.peer(1).error.write_text("y")
    assert run.errors() == [run.peer(1).error, run.peer(3).error]


def test_finished_and_started_runs_under_a_sweep(tmp_path):
    for name in ("0_a", "1_b", "2_c"):
        RunDir(tmp_path / name).private.mkdir(parents=True)
        RunDir(tmp_path / name).config.write_text("{}")
    for name in ("0_a", "2_c"):
        RunDir(tmp_path / name).summary.write_text("{}")
    assert run_dirs_under(tmp_path) == [tmp_path / "0_a", tmp_path / "2_c"]
    assert started_runs_under(tmp_path) == [tmp_path / n for n in ("0_a", "1_b", "2_c")]

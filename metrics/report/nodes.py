"""A run over several nodes (launch.nnodes > 1) writes RUN/node<R> per node; the report reads them as ONE run at RUN,
its summary merged by metrics/summary/build.py merge_nodes."""
from pathlib import Path

from metrics.report.runs import Run, load_run
from metrics.recording.rundir import node_rank_of
from metrics.summary.build import merge_nodes


def load(path: Path, folders: list[Path]) -> Run:
    """The run at path from its summary folders: itself, or its nodes' folders merged into one run."""
    if folders == [path]:
        return load_run(path)
    nodes = [load_run(folder) for folder in folders]
    ranks = [node_rank_of(folder) or 0 for folder in folders]  # all node folders here (run_folders)
    missing = sorted(set(range(max(n.nnodes for n in nodes))) - set(ranks))
    if len(nodes) == 1 and not missing:  # a one-node job: its summary is the run's
        nodes[0].path = path
        return nodes[0]
    peers = sorted((p for n in nodes for p in n.peers), key=lambda p: p.rank)
    return Run(path, merge_nodes([n.path for n in nodes], [n.summary for n in nodes], ranks, missing), peers)

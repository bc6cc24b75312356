"""A run over several nodes (launch.nnodes > 1, e.g. experiment=slurm hydra.launcher.nodes=2): each node's launcher
writes its own folder RUN/node<R> holding its own peers' logs and its own summary.json, of its own peers. The report
reads a job's node folders as ONE run at RUN, its summary built from its nodes' by metrics/summary/build.py
merge_nodes (which says how each figure spans the nodes).

A folder named node<R> whose parent holds no summary.json is node R of the run at its parent; a run of one node
(a one-node SLURM job: RUN/node0) is read the same way, at RUN.
"""
from pathlib import Path

from metrics.report.runs import Run, load_run
from metrics.recording.rundir import node_rank_of
from metrics.summary.build import merge_nodes


def load(path: Path, folders: list[Path]) -> Run:
    """The run at path from its summary folders: itself, or its nodes' folders merged into one run."""
    if folders == [path]:
        return load_run(path)
    nodes = [load_run(folder) for folder in folders]
    ranks = [node_rank_of(folder) for folder in folders]
    missing = sorted(set(range(max(n.nnodes for n in nodes))) - set(ranks))
    if len(nodes) == 1 and not missing:  # a one-node job: its summary is the run's
        nodes[0].path = path
        return nodes[0]
    peers = sorted((p for n in nodes for p in n.peers), key=lambda p: p.rank)
    return Run(path, merge_nodes([n.path for n in nodes], [n.summary for n in nodes], ranks, missing), peers)

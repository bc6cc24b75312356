"""A run over several nodes (launch.nnodes > 1, e.g. experiment=slurm hydra.launcher.nodes=2): each node's launcher
writes its own folder RUN/node<R> holding its own peers' logs and its own summary.json, of its own peers
(metrics/summary/build.py). The report reads a job's node folders as ONE run at RUN, its figures by the definitions one
node's summary states, over every node's workers:

  status           the worst node's (failed > interrupted > completed); a node that wrote no summary fails the run;
                   error, exit code and failed rank from the node that ended first among those that did not
                   complete (the others failed after it); every node's error stays in the run's errors
  samples          summed over nodes; throughput = all workers' samples in the measurement window / the longest
                   worker's training time in it, across nodes
  time-to-target   the worst worker's crossing over every node's workers (each worker's crossing time as its
                   node's summary gives it); samples-to-target: every worker's samples at that crossing, from all
                   workers' logs (metrics/summary/target.py); accuracy by worker over all workers
  per step         time breakdown and bytes per step: means over every worker's steps in the window (each node's
                   mean weighted by its steps there); bytes per sample: all workers' bytes / all workers' samples
                   in the window
  setting          shape, machine and link of the node that is worst off (the most oversubscribed, the least
                   alone, an unfaithful link), with every node's host; isolation over every node's ranks

A folder named node<R> whose parent holds no summary.json is node R of the run at its parent; a run of one node
(a one-node SLURM job: RUN/node0) is read the same way, at RUN.
"""
from pathlib import Path

from metrics.report.runs import Run, load_run
from metrics.recording.rundir import RunDir, node_rank_of
from metrics.summary.build import accuracy_over_workers, step_shares
from metrics.summary.schema import Evaluation, Isolation, Peer, Section, Summary
from metrics.summary.target import time_to_target

WORST_LAST = ("completed", "interrupted", "failed")  # a status not listed counts as failed
NO_SUMMARY = "wrote no summary.json (its launcher was stopped or its node lost: see the job's SLURM logs)"


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
    return Run(path, merged_summary(nodes, ranks, missing), peers)


def merged_summary(nodes: list[Run], ranks: list[int], missing: list[int]) -> Summary:
    """One summary for the run from its nodes' (see the module's docstring), built as metrics/summary/build.py
    builds one node's."""
    summaries = [n.summary for n in nodes]
    first = summaries[0]
    peers = sorted((p for s in summaries for p in s.peers or []), key=lambda p: p.rank)
    windows = windows_of(peers)
    longest = max((w["train_s"] for w in windows), default=0.0)
    steps = [sum(w["steps"] for w in windows_of(s.peers or [])) for s in summaries]  # its means' weight
    samples = [sum(w["samples"] for w in windows_of(s.peers or [])) for s in summaries]
    breakdown = {phase: weighted([((s.time_breakdown_s or {}).get(phase), w) for s, w in zip(summaries, steps)])
                 for phase in (first.time_breakdown_s or {})}
    hidden = weighted([(s.hidden_comm_s, w) for s, w in zip(summaries, steps)])
    shape = worst_of([s.shape for s in summaries], lambda s: s.oversubscription or 0)
    return Summary.from_dict(first.to_dict() | outcome(nodes, ranks, missing) | {
        "peers": [p.to_dict() for p in peers],
        "workers": sum(s.workers or 0 for s in summaries),
        "total_samples": sum(s.total_samples or 0 for s in summaries),
        "throughput_samples_per_s": sum(w["samples"] for w in windows) / longest if longest else None,
        "useful_samples": largest(s.useful_samples for s in summaries),
        "startup_wait_s": largest(s.startup_wait_s for s in summaries),
        "time_breakdown_s": breakdown,
        "hidden_comm_s": hidden,
        **step_shares(breakdown, hidden),
        "bytes_sent_per_step": weighted([(s.bytes_sent_per_step, w) for s, w in zip(summaries, steps)]),
        "bytes_recv_per_step": weighted([(s.bytes_recv_per_step, w) for s, w in zip(summaries, steps)]),
        "bytes_sent_per_sample": weighted([(s.bytes_sent_per_sample, n) for s, n in zip(summaries, samples)]),
        "bytes_recv_per_sample": weighted([(s.bytes_recv_per_sample, n) for s, n in zip(summaries, samples)]),
        **learning_curves(nodes),
        "evaluation": evaluation([s.evaluation for s in summaries]),
        "device": (first.device.to_dict() or {}) | {"gpus": sorted({g for s in summaries for g in s.device.gpus or []}),
                                            "gpu_shared": any(s.device.gpu_shared for s in summaries)},
        "isolation": isolation([s.isolation for s in summaries]),
        "shape": shape | {"hosts": [s.shape.host for s in summaries]} if shape else None,
        "machine": worst_of([s.machine for s in summaries], lambda m: (m.alone is False, m.other_cpu_share or 0)),
        "link": worst_of([s.link for s in summaries], lambda link: link.faithful is False) or first.link.to_dict(),
    })


def outcome(nodes: list[Run], ranks: list[int], missing: list[int]) -> dict:
    """Status, error, exit code, failed rank, lost peers, fault and times of the run; each node's own, in `nodes`."""
    summaries = [n.summary for n in nodes]
    listed = [{"node_rank": rank, "host": n.summary.shape.host, "path": str(n.path),
               "status": n.summary.status, "error": n.summary.error} for rank, n in zip(ranks, nodes)]
    listed += [{"node_rank": rank, "host": None, "path": None, "status": None,
                "error": f"node rank {rank} {NO_SUMMARY}"} for rank in missing]
    ended = [(s.started_at or 0) + (s.wall_s or 0) for s in summaries]
    found = {"nodes": sorted(listed, key=lambda n: n["node_rank"]),
             "status": max((s.status for s in summaries), key=severity) if not missing else "failed",
             "started_at": min(s.started_at or 0 for s in summaries),
             "lost_peers": sorted({r for s in summaries for r in s.lost_peers or []})}
    found["wall_s"] = max(ended) - found["started_at"]
    faults = sorted((s.fault for s in summaries if s.fault), key=lambda f: f.time or 0)
    found["fault"] = faults[0].to_dict() if faults else None
    failed = sorted(((end, s) for end, s in zip(ended, summaries) if s.status != "completed"), key=lambda f: f[0])
    if failed:
        cause = failed[0][1]
        found |= {"error": cause.error, "exit_code": cause.exit_code, "failed_rank": cause.failed_rank}
    elif missing:
        found |= {"error": f"node rank {', '.join(map(str, missing))} {NO_SUMMARY}", "exit_code": None,
                  "failed_rank": None}
    return found


def learning_curves(nodes: list[Run]) -> dict:
    """Time-to-target by the worst worker over every node's workers (metrics/summary/target.py: its samples and
    steps from every worker's logs; its seconds from each worker's crossing as its node's summary converted them)
    and the accuracy of every worker."""
    summaries = [n.summary for n in nodes]
    workers = [(n, w) for n in nodes for w in n.workers]
    found = time_to_target({w.rank: w.evals for _, w in workers}, {w.rank: w.steps for _, w in workers},
                           {w.rank: RunDir(n.path).peer(w.rank).eval_samples for n, w in workers},
                           summaries[0].target)
    crossed = {rank: t for s in summaries for rank, t in (s.time_to_target_by_rank or {}).items()}
    samples = found["samples_to_target"]
    worst = max(crossed.values()) if samples is not None and crossed and None not in crossed.values() else None
    found |= {"time_to_target_by_rank": crossed, "time_to_target_s": worst,
              "time_per_sample_s": worst / samples if worst is not None and samples else None}
    found["accuracy_by_worker"] = accuracy_over_workers(
        {rank: a for s in summaries for rank, a in (s.accuracy_by_worker.by_rank or {}).items()})
    found["final_test_accuracy"] = found["accuracy_by_worker"]["worst"]
    found["final_test_loss"] = largest(s.final_test_loss for s in summaries)
    return found


def evaluation(found: list[Evaluation]) -> dict:
    return (found[0].to_dict() or {}) | {
        "interval_samples": total(e.interval_samples for e in found),
        "test_samples": largest(e.test_samples for e in found),
        "evaluations": largest(e.evaluations for e in found),
        "after_training_s": largest(e.after_training_s for e in found),
        "snapshot_pause_s": largest(e.snapshot_pause_s for e in found)}


def isolation(found: list[Isolation]) -> dict:
    """Every node's ranks; isolated where every node was, faithful where every node measured it so."""
    apart = next((i for i in found if i.status != "isolated"), found[0])
    faithful = [i.faithful for i in found]
    return (found[0].to_dict() or {}) | {
        "status": apart.status, "reason": apart.reason,
        "faithful": False if False in faithful else None if None in faithful else True,
        "unfaithful": [why for i in found for why in i.unfaithful or []],
        "by_rank": [row for i in found for row in i.by_rank or []]}


def worst_of(sections: list[Section], badness) -> dict | None:
    """The section of the node worst off by badness(section) (the first node's on a tie); None where no node has it."""
    found = [s for s in sections if s]
    return max(found, key=badness).to_dict() if found else None


def severity(status: str | None) -> int:
    return WORST_LAST.index(status) if status in WORST_LAST else len(WORST_LAST)


def windows_of(peers: list[Peer]) -> list[dict]:
    """Each peer's samples, training time and steps in the measurement window (a summary from before the window:
    all its steps)."""
    return [p.window or {"samples": p.samples or 0, "train_s": p.train_s or 0.0, "steps": p.steps or 0}
            for p in peers if p.train_s is not None]


def weighted(pairs: list[tuple]) -> float | None:
    """The mean of values weighted by their weights (pairs without a value or weight left out)."""
    known = [(v, w) for v, w in pairs if v is not None and w]
    return sum(v * w for v, w in known) / sum(w for _, w in known) if known else None


def largest(values) -> float | None:
    return max((v for v in values if v is not None), default=None)


def total(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None

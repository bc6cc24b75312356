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
import statistics
from pathlib import Path

from metrics.report.runs import Run, load_run
from metrics.recording.rundir import RunDir, node_rank_of
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


def merged_summary(nodes: list[Run], ranks: list[int], missing: list[int]) -> dict:
    """One summary for the run from its nodes' (see the module's docstring)."""
    summaries = [n.summary for n in nodes]
    first = summaries[0]
    merged = dict(first)
    merged |= outcome(nodes, ranks, missing)
    merged["peers"] = sorted((p for s in summaries for p in s.get("peers") or []), key=lambda p: p.get("rank", 0))
    merged["workers"] = sum(s.get("workers") or 0 for s in summaries)
    merged["total_samples"] = sum(s.get("total_samples") or 0 for s in summaries)
    windows = windows_of(merged["peers"])
    longest = max((w["train_s"] for w in windows), default=0.0)
    merged["throughput_samples_per_s"] = sum(w["samples"] for w in windows) / longest if longest else None
    merged["useful_samples"] = largest(s.get("useful_samples") for s in summaries)
    merged["startup_wait_s"] = largest(s.get("startup_wait_s") for s in summaries)
    steps = [sum(w["steps"] for w in windows_of(s.get("peers") or [])) for s in summaries]  # its means' weight
    breakdown = {phase: weighted([((s.get("time_breakdown_s") or {}).get(phase), w) for s, w in zip(summaries, steps)])
                 for phase in (first.get("time_breakdown_s") or {})}
    step_total = sum(v or 0.0 for v in breakdown.values())
    merged["time_breakdown_s"] = breakdown
    merged["time_breakdown_share"] = {p: (v or 0.0) / step_total for p, v in breakdown.items()} if step_total else {}
    for key in ("hidden_comm_s", "bytes_sent_per_step", "bytes_recv_per_step"):
        merged[key] = weighted([(s.get(key), w) for s, w in zip(summaries, steps)])
    hidden = merged["hidden_comm_s"]
    merged["hidden_comm_share"] = hidden / step_total if hidden is not None and step_total else None
    samples = [sum(w["samples"] for w in windows_of(s.get("peers") or [])) for s in summaries]
    for key in ("bytes_sent_per_sample", "bytes_recv_per_sample"):
        merged[key] = weighted([(s.get(key), n) for s, n in zip(summaries, samples)])
    merged |= learning_curves(nodes)
    merged["evaluation"] = evaluation(summaries)
    merged["device"] = device(summaries)
    merged["isolation"] = isolation(summaries)
    shape = worst_of(summaries, "shape", lambda s: s.get("oversubscription") or 0)
    merged["shape"] = shape | {"hosts": [(s.get("shape") or {}).get("host") for s in summaries]} if shape else None
    merged["machine"] = worst_of(summaries, "machine", lambda m: (m.get("alone") is False, m.get("other_cpu_share") or 0))
    merged["link"] = worst_of(summaries, "link", lambda link: link.get("faithful") is False) or first.get("link")
    return merged


def outcome(nodes: list[Run], ranks: list[int], missing: list[int]) -> dict:
    """Status, error, exit code, failed rank, lost peers, fault and times of the run; each node's own, in `nodes`."""
    summaries = [n.summary for n in nodes]
    listed = [{"node_rank": rank, "host": (n.summary.get("shape") or {}).get("host"), "path": str(n.path),
               "status": n.summary.get("status"), "error": n.summary.get("error")} for rank, n in zip(ranks, nodes)]
    listed += [{"node_rank": rank, "host": None, "path": None, "status": None,
                "error": f"node rank {rank} {NO_SUMMARY}"} for rank in missing]
    ended = [s.get("started_at", 0) + s.get("wall_s", 0) for s in summaries]
    found = {"nodes": sorted(listed, key=lambda n: n["node_rank"]),
             "status": max((s.get("status") for s in summaries), key=severity) if not missing else "failed",
             "started_at": min(s.get("started_at", 0) for s in summaries),
             "lost_peers": sorted({r for s in summaries for r in s.get("lost_peers") or []})}
    found["wall_s"] = max(ended) - found["started_at"]
    faults = sorted((s["fault"] for s in summaries if s.get("fault")), key=lambda f: f.get("time", 0))
    found["fault"] = faults[0] if faults else None
    failed = sorted((end, s) for end, s in zip(ended, summaries) if s.get("status") != "completed")
    if failed:
        cause = failed[0][1]
        found |= {"error": cause.get("error"), "exit_code": cause.get("exit_code"),
                  "failed_rank": cause.get("failed_rank")}
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
                           summaries[0]["target"])
    crossed = {rank: t for s in summaries for rank, t in (s.get("time_to_target_by_rank") or {}).items()}
    samples = found["samples_to_target"]
    worst = max(crossed.values()) if samples is not None and crossed and None not in crossed.values() else None
    found |= {"time_to_target_by_rank": crossed, "time_to_target_s": worst,
              "time_per_sample_s": worst / samples if worst is not None and samples else None}
    accuracy = {rank: a for s in summaries
                for rank, a in ((s.get("accuracy_by_worker") or {}).get("by_rank") or {}).items()}
    known = [a for a in accuracy.values() if a is not None]
    found["accuracy_by_worker"] = {"mean": statistics.fmean(known) if known else None, "worst": min(known, default=None),
                                   "best": max(known, default=None), "by_rank": accuracy}
    found["final_test_accuracy"] = found["accuracy_by_worker"]["worst"]
    found["final_test_loss"] = largest(s.get("final_test_loss") for s in summaries)
    return found


def evaluation(summaries: list[dict]) -> dict:
    found = [s.get("evaluation") or {} for s in summaries]
    return found[0] | {"interval_samples": total(e.get("interval_samples") for e in found),
                       **{key: largest(e.get(key) for e in found)
                          for key in ("test_samples", "evaluations", "after_training_s", "snapshot_pause_s")}}


def device(summaries: list[dict]) -> dict:
    found = [s.get("device") or {} for s in summaries]
    return found[0] | {"gpus": sorted({g for d in found for g in d.get("gpus") or []}),
                       "gpu_shared": any(d.get("gpu_shared") for d in found)}


def isolation(summaries: list[dict]) -> dict:
    """Every node's ranks; isolated where every node was, faithful where every node measured it so."""
    found = [s.get("isolation") or {} for s in summaries]
    apart = next((i for i in found if i.get("status") != "isolated"), found[0])
    faithful = [i.get("faithful") for i in found]
    return found[0] | {"status": apart.get("status"), "reason": apart.get("reason"),
                       "faithful": False if False in faithful else None if None in faithful else True,
                       "unfaithful": [why for i in found for why in i.get("unfaithful") or []],
                       "by_rank": [row for i in found for row in i.get("by_rank") or []]}


def worst_of(summaries: list[dict], key: str, badness) -> dict:
    """The section `key` of the node worst off by badness(section) (the first node's on a tie)."""
    found = [s.get(key) for s in summaries if s.get(key)]
    return dict(max(found, key=badness)) if found else {}


def severity(status: str | None) -> int:
    return WORST_LAST.index(status) if status in WORST_LAST else len(WORST_LAST)


def windows_of(peers: list[dict]) -> list[dict]:
    """Each peer's samples, training time and steps in the measurement window (a summary from before the window:
    all its steps)."""
    return [p.get("window") or {"samples": p.get("samples") or 0, "train_s": p.get("train_s") or 0.0,
                                "steps": p.get("steps") or 0} for p in peers if p.get("train_s") is not None]


def weighted(pairs: list[tuple]) -> float | None:
    """The mean of values weighted by their weights (pairs without a value or weight left out)."""
    known = [(v, w) for v, w in pairs if v is not None and w]
    return sum(v * w for v, w in known) / sum(w for _, w in known) if known else None


def largest(values) -> float | None:
    return max((v for v in values if v is not None), default=None)


def total(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None

"""summary.json's "averaging_rounds": the peers' rounds.jsonl (hivemind's averagers), one record per round."""
from collections import Counter

from metrics.recording.jsonl import read_jsonl
from metrics.recording.rundir import RunDir
from metrics.recording.methods import methods

METHOD = methods("rounds")["method"]


def join_rounds(records: list[dict]) -> list[dict]:
    """Member records (each with its rank) -> one record per round, in order of start."""
    by_group: dict[str, list[dict]] = {}
    for record in records:
        by_group.setdefault(record["group_id"], []).append(record)
    rounds = []
    for group_id, members in by_group.items():
        epochs = [m["epoch"] for m in members if isinstance(m["epoch"], int)]
        rounds.append({"group_id": group_id, "kind": members[0]["kind"], "epoch": max(epochs, default=None),
                       "group_size": max(m["group_size"] for m in members), "members_recorded": len(members),
                       "ranks": sorted(m["rank"] for m in members),
                       "started_at": min(m["started_at"] for m in members),
                       "duration_s": max(m["duration_s"] for m in members),
                       "bytes_sent": sum(m["bytes_sent"] for m in members),
                       "bytes_recv": sum(m["bytes_recv"] for m in members),
                       "success": all(m["success"] for m in members),
                       "overlapped": any(m["overlapped"] for m in members)})
    return sorted(rounds, key=lambda r: r["started_at"])


def rounds_section(run: RunDir, workers: int) -> dict | None:
    """None where no peer recorded rounds (strategies that do not)."""
    records = [r | {"rank": p.rank} for p in run.peers() if p.rounds.exists() for r in read_jsonl(p.rounds)]
    if not records:
        return None
    rounds = join_rounds(records)
    sizes: dict[str, Counter[int]] = {}
    for r in rounds:
        sizes.setdefault(r["kind"], Counter())[r["group_size"]] += 1
    return {"rounds": rounds,
            "group_sizes": {kind: dict(sorted(s.items())) for kind, s in sizes.items()},
            "whole_swarm_share": {kind: s.get(workers, 0) / sum(s.values()) for kind, s in sizes.items()},
            "failed": sum(not r["success"] for r in rounds),
            "method": METHOD}

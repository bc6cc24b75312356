"""summary.json's "noise_scale": B_simple from the workers' and the averaged gradient's norms (methods.yaml)."""
import statistics
from metrics.recording.methods import methods

METHODS = methods("noise_scale")


def noise_scale_section(steps_by_rank: dict[int, list[dict]]) -> dict | None:
    """B_simple and its two parts from the workers' step logs (None: no step has both norms from every worker)."""
    if len(steps_by_rank) < 2:
        return None
    by_step: dict[int, list[tuple[int, float, float]]] = {}
    for steps in steps_by_rank.values():
        previous = 0
        for s in steps:
            batch, previous = s["samples"] - previous, s["samples"]
            if "grad_sq_local" in s and "grad_sq_global" in s:
                by_step.setdefault(s["step"], []).append((batch, s["grad_sq_local"], s["grad_sq_global"]))
    grad_sq, trace_cov = [], []
    for rows in by_step.values():
        batches = {batch for batch, _, _ in rows}
        if len(rows) < len(steps_by_rank) or len(batches) != 1:
            continue  # a step some worker did not measure, or unequal batches: b is not one number
        b = batches.pop()
        big = len(rows) * b
        small_sq = statistics.fmean(local for _, local, _ in rows)
        big_sq = statistics.fmean(averaged for _, _, averaged in rows)
        grad_sq.append((big * big_sq - b * small_sq) / (big - b))
        trace_cov.append((small_sq - big_sq) / (1 / b - 1 / big))
    if not grad_sq:
        return None
    mean_grad_sq, mean_trace = statistics.fmean(grad_sq), statistics.fmean(trace_cov)
    return {"b_simple": mean_trace / mean_grad_sq if mean_grad_sq > 0 else None, "grad_sq": mean_grad_sq,
            "trace_cov": mean_trace, "steps": len(grad_sq), "worker_batch": b, "global_batch": big}

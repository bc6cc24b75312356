"""The report's plots, as base64 PNG (matplotlib Agg) with a caption naming unit and method."""
import base64
import io
import math
import statistics
import textwrap
from collections.abc import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as Canvas  # noqa: E402

from metrics.report.compare import Comparison  # noqa: E402
from metrics.report.formats import phase_name  # noqa: E402
from metrics.report.model import Figure  # noqa: E402
from metrics.report.primary import Primary  # noqa: E402
from metrics.report.runs import Group, Run, Section  # noqa: E402
from metrics.report.stats import EQUIVALENT, FASTER, SLOWER  # noqa: E402
from metrics.report.tables import claim_cell  # noqa: E402
from metrics.recording.steplog import PHASES  # noqa: E402
from metrics.summary.schema import Json, Summary  # noqa: E402

MAX_RESOURCE_RUNS = 12  # rows of the per-worker small multiples
PHASE_COLORS = {"data_s": "#4c72b0", "compute_s": "#55a868", "comm_s": "#c44e52", "opt_s": "#8172b2",
                "wait_s": "#b3b3b3"}
PHASE_NAMES = {"data_s": "data", "compute_s": "compute", "comm_s": "comm", "opt_s": "optimizer", "wait_s": "waiting"}


def to_png(fig: Canvas) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


# Curves: one point per step (training loss) or per evaluation (test accuracy).

def global_samples(run: Run) -> dict[int, int]:
    """Step -> samples trained by all workers up to that step (each worker's own count at that step)."""
    per_worker = [{s["step"]: s["samples"] for s in p.steps} for p in run.peers if p.steps]
    steps = sorted({step for worker in per_worker for step in worker})
    totals, last = {0: 0}, [0] * len(per_worker)
    for step in steps:
        for i, worker in enumerate(per_worker):
            last[i] = worker.get(step, last[i])
        totals[step] = sum(last)
    return totals


def rolling_mean(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def worker_points(run: Run, kind: str, window: int) -> dict[int, list[tuple[float, float, float]]]:
    """Step -> (training time s, global samples, value) of every worker: its test accuracy (%) at each evaluation,
    or its training loss (rolling mean over `window` steps) at each step."""
    samples = global_samples(run)
    points: dict[int, list] = {}
    for worker in run.workers:
        if kind == "loss":
            records = worker.steps
            values = rolling_mean([r["loss"] for r in records], window)
        else:
            records = worker.evals
            values = [100 * r["test_accuracy"] for r in records]
        for record, value in zip(records, values):
            points.setdefault(record["step"], []).append(
                (record["train_s"], samples.get(record["step"], record["samples"]), value))
    return points


def run_curve(run: Run, kind: str, window: int) -> list[tuple[float, ...]] | None:
    """Per step every worker of the run reached, in step order: x time (mean over workers), x samples, y mean, y min,
    y max. Each worker's time grows with its steps, so the line runs forward in time; repeats of other lengths are
    their own lines (a mean over the runs still at a step would jump back in time where a slow run ended)."""
    points = worker_points(run, kind, window)
    workers = max(map(len, points.values()), default=0)
    rows = [(statistics.fmean(p[0] for p in found), statistics.fmean(p[1] for p in found),
             statistics.fmean(p[2] for p in found), min(p[2] for p in found), max(p[2] for p in found))
            for step, found in sorted(points.items()) if len(found) == workers]
    return list(zip(*rows)) if rows else None


def loss_window(section: Section) -> int:
    longest = max((len(r.reference.steps) for g in section.groups for r in g.runs if r.reference), default=1)
    return max(1, longest // 25)


def convergence_plot(section: Section) -> Figure:
    window = loss_window(section)
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5), layout="constrained")
    for group in section.groups:
        for row, kind in enumerate(("accuracy", "loss")):
            curves = [c for c in (run_curve(run, kind, window) for run in group.runs) if c]
            for i, (t, samples, mean, low, high) in enumerate(curves):
                for col, x in enumerate((t, samples)):
                    ax = axes[row][col]
                    label = group.label if row == col == i == 0 else None
                    ax.plot(x, mean, color=group.color, label=label, marker="o" if kind == "accuracy" else None,
                            markersize=3)
                    ax.fill_between(x, low, high, color=group.color, alpha=0.2)
    for col, xlabel in enumerate(("training time (s, pauses to save weights for evaluation excluded)",
                                  "samples trained by all workers")):
        axes[0][col].set_ylabel("test accuracy (%)")
        axes[1][col].set_ylabel("training loss" + (f" (rolling mean of {window} steps)" if window > 1 else ""))
        for row in range(2):
            axes[row][col].set_xlabel(xlabel)
            axes[row][col].grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncol=4, fontsize=8)
    synthetic = " (synthetic data: no convergence meaning)" if section.synthetic else ""
    smoothing = f", rolling mean over {window} steps" if window > 1 else ""
    return Figure(f"Convergence{synthetic}", to_png(fig),
                "Test accuracy (%, every worker evaluating its own model on the whole held-out split at the same "
                f"steps) and training loss (cross-entropy of each worker's own minibatches{smoothing}) against "
                "training time (s, each worker's loop time minus its pauses to save weights for evaluation and to time "
                "the speed reference; mean over workers) and against samples trained by all workers (sum of each "
                "worker's sample count at that step). One line per run, at the steps all its workers reached: the mean "
                "over its workers; band = their spread, min to max.")


# Bars: one per configuration, error bars = standard deviation over repeats.

def _bar_axes(groups: list[Group], width: float = 10) -> tuple[Canvas, Axes]:
    fig, ax = plt.subplots(figsize=(width, 1.9 + 0.4 * len(groups)), layout="constrained")
    ax.set_yticks(range(len(groups)), [g.label for g in groups], fontsize=8)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    return fig, ax


THROUGHPUT, SENT, RECEIVED = (lambda s: s.throughput_samples_per_s, lambda s: s.bytes_sent_per_sample,
                              lambda s: s.bytes_recv_per_sample)


def _mean_sd(group: Group, figure: Callable[[Summary], float | None]) -> tuple[float, float]:
    """Mean and sd over the group's runs of figure(summary)."""
    values = group.values(lambda r: figure(r.summary))
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def throughput_plot(groups: list[Group]) -> Figure:
    fig, ax = _bar_axes(groups)
    stats = [_mean_sd(g, THROUGHPUT) for g in groups]
    ax.barh(range(len(groups)), [m for m, _ in stats], xerr=[s for _, s in stats],
            color=[g.color for g in groups], capsize=3)
    for i, (m, sd) in enumerate(stats):
        ax.annotate(f"{m:.0f}", (m + sd, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlabel("global throughput (samples/s)")
    return Figure("Throughput", to_png(fig),
                "Global throughput in samples/s: all workers' trained samples / the longest worker's training "
                "time (pauses to save weights for evaluation and to time the speed reference excluded). Error "
                "bars: standard deviation over repeats.")


def breakdown_plot(groups: list[Group]) -> Figure:
    fig, ax = _bar_axes(groups)
    left = [0.0] * len(groups)
    for phase in PHASES:
        shares = [100 * (g.mean(lambda r: (r.summary.time_breakdown_share or {}).get(phase)) or 0.0) for g in groups]
        ax.barh(range(len(groups)), shares, left=left, color=PHASE_COLORS[phase],
                label=PHASE_NAMES[phase])
        left = [a + b for a, b in zip(left, shares)]
    ax.set_xlabel("share of the mean step time (%)")
    ax.set_xlim(0, 100)
    fig.legend(loc="outside lower center", ncol=5, fontsize=8)
    return Figure("Time breakdown (bottleneck view)", to_png(fig),
                "Share (%) of the mean step time spent in each phase, mean per step over all workers, "
                "perf_counter around each phase; comm = measured communication (waiting for other peers included, 0 "
                "in a step that sent and received nothing); waiting = the training thread's waits for a CPU that other "
                "processes took, and the rest of a step that did not communicate. Repeats: mean.")


def wall_phases_plot(groups: list[Group]) -> Figure | None:
    shown = [(g, medians) for g in groups if (medians := g.median_phases())]
    if not shown:
        return None
    fig, ax = _bar_axes([g for g, _ in shown])
    left = [0.0] * len(shown)
    for index, phase in enumerate(shown[0][1]):
        seconds = [medians[phase] for _, medians in shown]
        ax.barh(range(len(shown)), seconds, left=left, color=plt.get_cmap("tab20")(index % 20), label=phase_name(phase))
        left = [a + b for a, b in zip(left, seconds)]
    ax.set_xlabel("seconds of the job's wall time")
    fig.legend(loc="outside lower center", ncol=8, fontsize=8)
    return Figure("Where the wall time went", to_png(fig),
                  "Each configuration's job, from its start to its summary, split into phases (summary.json's "
                  "wall_phases_s, real seconds, defined in Methods): per phase the median over its runs.")


def bytes_plot(groups: list[Group]) -> Figure:
    fig, ax = _bar_axes(groups)
    height = 0.4
    for offset, figure, name in ((-height / 2, SENT, "sent"), (height / 2, RECEIVED, "received")):
        stats = [_mean_sd(g, figure) for g in groups]
        ax.barh([i + offset for i in range(len(groups))], [m / 2**10 for m, _ in stats], height,
                xerr=[s / 2**10 for _, s in stats], label=name, alpha=0.9 if name == "sent" else 0.5,
                color=[g.color for g in groups], edgecolor="black", hatch="" if name == "sent" else "//")
    ax.set_xlim(left=0)
    if not any(_mean_sd(g, figure)[0] for g in groups for figure in (SENT, RECEIVED)):
        ax.text(0.5, 0.5, "no payload exchanged (0 bytes)", transform=ax.transAxes, ha="center", color="gray")
    ax.set_xlabel("payload per worker per trained sample (KiB)")
    fig.legend(loc="outside lower center", ncol=2, fontsize=8)
    return Figure("Bytes per sample", to_png(fig),
                "Payload KiB (1024 bytes) sent (solid) and received (hatched) per sample a worker trained "
                "(summary.json's bytes_sent_per_sample / bytes_recv_per_sample): exact accounting of the tensors the "
                "strategy exchanged (for library collectives, the ring's share of the bytes counted as handed to the "
                "library; no protocol headers). Error bars: standard deviation over repeats.")


def scaling_plot(groups: list[Group]) -> Figure | None:
    """Throughput against peers, one line per configuration family, beside the ideal N x one-peer throughput."""
    peers = sorted({g.first.config["peers"] for g in groups})
    if len(peers) < 2:
        return None
    fig, ax = plt.subplots(figsize=(10, 5), layout="constrained")
    families: dict[str, list[Group]] = {}
    for group in groups:
        families.setdefault(group.family, []).append(group)
    for family, members in families.items():
        members.sort(key=lambda g: g.first.config["peers"])
        stats = [_mean_sd(g, THROUGHPUT) for g in members]
        ax.errorbar([g.first.config["peers"] for g in members], [m for m, _ in stats], yerr=[s for _, s in stats],
                    marker="o", capsize=3, color=members[0].color, label=family)
    ideal_bases = {g.one_peer.label: g.one_peer for g in groups if g.one_peer is not None}
    for label, base in ideal_bases.items():
        one_peer, _ = _mean_sd(base, THROUGHPUT)
        ax.plot(peers, [n * one_peer for n in peers], ls="--", color="gray", label=f"ideal: N × {label}")
    ax.set_xticks(peers)
    ax.set_xlabel("peers (N)")
    ax.set_ylabel("global throughput (samples/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncol=3, fontsize=8)
    missing = "" if ideal_bases else " No ideal line: no `single` run with 1 peer of the same CPUs."
    return Figure("Throughput vs peers", to_png(fig),
                "Global throughput (samples/s: all workers' trained samples / the longest worker's training time) "
                "against the number of peers, one line per configuration that differs only in its resource shape; "
                "error bars: standard deviation over repeats. Dashed: the ideal, N × the throughput of the "
                "`single` run with 1 peer of the same CPUs per peer." + missing)


# Per-worker resources over time: one row per run.

def _rate(resources: list[Json], keys: tuple[str, ...]) -> tuple[list[float], list[float]]:
    t, rate = [], []
    for before, after in zip(resources, resources[1:]):
        elapsed = after["t"] - before["t"]
        if elapsed > 0:
            t.append(after["t"])
            rate.append(sum(after.get(k, 0) - before.get(k, 0) for k in keys) / elapsed / 2**20)
    return t, rate


def resources_plot(groups: list[Group]) -> Figure | None:
    runs = [(g, r) for g in groups for r in g.runs if any(p.resources for p in r.peers)]
    shown = runs[:MAX_RESOURCE_RUNS]
    if not shown:
        return None
    fig, axes = plt.subplots(len(shown), 3, figsize=(13, 0.6 + 2.1 * len(shown)), layout="constrained",
                             squeeze=False)
    for (group, run), row in zip(shown, axes):
        host_wide = "host-wide" in (run.summary.network_scope or "")
        for peer in run.peers:
            if not peer.resources:
                continue
            t = [r["t"] for r in peer.resources]
            row[0].plot(t, [r["cpu_percent"] for r in peer.resources], label=f"peer{peer.rank}", lw=1)
            row[1].plot(t, [r["rss_bytes"] / 2**20 for r in peer.resources], lw=1)
            if not host_wide or peer is run.reference:
                row[2].plot(*_rate(peer.resources, ("net_tx_bytes", "lo_tx_bytes")), lw=1)
        row[0].set_title(textwrap.shorten(f"{group.label} seed={run.config.get('seed')}", 150), loc="left", fontsize=8)
        row[0].legend(fontsize=6, ncol=4)
        for ax, label in zip(row, ("CPU (%)", "RSS (MiB)", "net tx (MiB/s)" + (" host-wide" if host_wide else ""))):
            ax.set_ylabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("time since the peer's sampler started (s)", fontsize=8)
    omitted = f" Only the first {MAX_RESOURCE_RUNS} of {len(runs)} runs are shown." if len(runs) > len(shown) else ""
    return Figure("Resources per worker over time", to_png(fig),
                "Sampler every sampler.interval seconds, per peer (process tree summed): CPU % = CPU time per "
                "interval (100 = one core); RSS in MiB; network transmit rate in MiB/s over all interfaces "
                "including loopback, from /proc/net/dev of the peer's network namespace (host-wide with "
                "network=loopback: shared by all peers and any other traffic on the host, so one line is shown)."
                + omitted)


def section_plots(section: Section, ranked_groups: list[Group]) -> list[Figure]:
    plots = [convergence_plot(section), throughput_plot(ranked_groups), scaling_plot(ranked_groups),
             breakdown_plot(ranked_groups), wall_phases_plot(ranked_groups), bytes_plot(ranked_groups),
             resources_plot(ranked_groups)]
    return [p for p in plots if p is not None]


CLAIM_COLORS = {FASTER: "#2a7d3a", SLOWER: "#b03030", EQUIVALENT: "#3060b0"}


def ratio_ticks(low: float, high: float) -> list[float]:
    """Round ratios from 1 outwards within [low, high], at least an eighth of the axis apart."""
    gap = math.log(high / low) / 8
    ticks = [1.0]
    for side in ((1.1, 1.25, 1.5, 2, 3, 5, 10), (0.9, 0.8, 0.67, 0.5, 0.33, 0.2, 0.1)):
        last = 1.0
        for t in side:
            if low <= t <= high and abs(math.log(t / last)) >= gap:
                ticks.append(t)
                last = t
    return sorted(ticks)


def forest_plot(comparisons: list[Comparison], control: list[Comparison], primary: Primary) -> Figure | None:
    """Every comparison's ratio and 95 % interval on one log axis, the claim beside its marker."""
    shown = [c for c in [*comparisons, *control] if c.ratio.n]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.3 * len(shown)), layout="constrained")
    for i, c in enumerate(shown):
        estimate = c.ratio.estimate
        low, high = c.ratio.interval() or (estimate, estimate)
        low, high = low or estimate, high if math.isfinite(high) else estimate  # an open end: the bound alone
        color = CLAIM_COLORS.get(c.decision, "#777") if c in comparisons else "#777"
        ax.errorbar(estimate, i, xerr=[[estimate - low], [high - estimate]], fmt="o", color=color, capsize=3)
        ax.annotate(claim_cell(c, comparisons), (high, i), xytext=(6, 0), textcoords="offset points", va="center",
                    fontsize=8, color=color)
    ax.axvline(1, color="#444", lw=1)
    ax.set_xscale("log")
    ax.margins(x=0.15)
    ticks = ratio_ticks(*ax.get_xlim())
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(len(shown)), [f"{c.this.label} against {c.other.label}" for c in shown], fontsize=8)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(f"{primary.name} ratio (> 1: the configuration is the faster), 95 % interval, log axis")
    return Figure("Comparisons on one axis", to_png(fig),
                  f"Each comparison's paired ratio of {primary.name} (geometric mean over blocks) and its 95 % "
                  "t-interval on a log axis; the line at 1 is no difference; the label is the claim (the control arm, "
                  "grey: the baseline against its second run, outside the family). Numbers: the table above.")

"""The report's tables (model.Table): one row per configuration, mean ± sd over repeats, ratios with intervals."""
import math
import statistics
from collections.abc import Callable

from metrics.report.compare import Comparison
from metrics.report.formats import MISSING, counted, cpus, interval_text, mib, number, percent, phase_name
from metrics.report.model import Table
from metrics.report.primary import Primary, time_observation
from metrics.report.runs import Group, Run, RunFigure
from metrics.report.stats import ALPHA, Ratio, olympic_mean
from metrics.recording.steplog import PHASES
from metrics.summary.schema import Summary


def stat(group: Group, figure: RunFigure, fmt: Callable[[float], str] = number) -> str:
    """fmt(value) for one run; "mean ± sd" over repeats; "(k/n)" when some runs lack the figure."""
    values = group.values(figure)
    if not values:
        return MISSING
    if len(values) == 1:
        text = fmt(values[0])
    else:
        spread = statistics.stdev(values)
        text = f"{fmt(statistics.fmean(values))} ± {number(spread, 2) if fmt is number else fmt(spread)}"
    if len(group.runs) > 1 and len(values) < len(group.runs):
        text += f" ({len(values)}/{len(group.runs)})"
    return text


def interval_stat(group: Group, figure: RunFigure, fmt: Callable[[float], str] = number) -> str:
    """A positive figure's geometric mean over repeats, its 95 % t-interval on the logs and its count of repeats
    ("k of n" when some runs lack the figure)."""
    values = [v for v in group.values(figure) if v > 0]
    if not values:
        return MISSING
    unit = repeats_unit(group)
    count = f"{len(values)} of {len(group.runs)}" if len(values) < len(group.runs) else f"{len(values)}"
    found = Ratio(values)
    if (interval := found.interval()) is None:
        why = "" if found.n == 1 else ", zero spread"
        return f"{fmt(found.estimate)} ({count} {unit[:-1] if count == '1' else unit}{why}, no interval)"
    low, high = interval
    return f"{fmt(found.estimate)} [{fmt(low)}, {fmt(high)}] ({count} {unit})"


def status_of(group: Group) -> str:
    statuses = [(r.summary.status or "?") for r in group.runs]
    return ", ".join(f"{s} x{statuses.count(s)}" if len(statuses) > 1 else s for s in dict.fromkeys(statuses))


def fault_tolerance(summary: Summary) -> str:
    """Outcome of an injected fault: survived (with the peers lost) or how long the run took to end."""
    fault = summary.fault
    if not fault:
        return MISSING
    if fault.survived:
        return f"survived (lost peers {summary.lost_peers or []})"
    return f"failed in {number(fault.run_ended_after_s)} s"


def fault_tolerance_of(group: Group) -> str:
    return ", ".join(dict.fromkeys(fault_tolerance(r.summary) for r in group.runs))


# Ranking within a section: on the primary figure alone.

def reached_count(group: Group) -> tuple[int, int]:
    """(runs that reached the target, runs): a crossing at the first evaluation (time 0) is a crossing."""
    return sum(time_observation(r).reached for r in group.runs), len(group.runs)


def mlperf_time(group: Group) -> float:
    """MLPerf's summary of the group's time-to-target: olympic mean, a miss counted as the slowest."""
    return olympic_mean([time_observation(r).mlperf for r in group.runs])


def rank_key(group: Group, primary: Primary) -> tuple[float | str, ...]:
    completed = sum(r.completed for r in group.runs)
    mean_throughput = group.mean(lambda r: r.summary.throughput_samples_per_s) or 0.0
    if not primary.is_time:
        return (-completed, -mean_throughput, group.label)
    reached, runs = reached_count(group)
    times = [time_observation(r).low for r in group.runs if time_observation(r).reached]
    typical = statistics.fmean(times) if times else math.inf
    return (not completed, reached < runs, -reached, mlperf_time(group), typical, group.label)


def ranked(groups: list[Group], primary: Primary) -> list[Group]:
    return sorted(groups, key=lambda g: rank_key(g, primary))


def rank_note(primary: Primary) -> str:
    if not primary.is_time:
        return ("Ranked by blocks completed (a failed run is the worst outcome), then by mean global throughput, the "
                "primary figure.")
    return (f"Ranked on the primary figure, time-to-target ({primary.target}): configurations that reached it in "
            "every block first, then by blocks reached, then by MLPerf's summary (olympic mean, a miss counted as "
            "the slowest); the order alone is no finding.")




def configuration_table(groups: list[Group]) -> Table:
    rows = []
    for rank, group in enumerate(groups, 1):
        run = group.first
        config = run.config
        rows.append([str(rank), group.label, run.strategy,
                     ", ".join(f"{k}={v}" for k, v in run.knobs.items()) or MISSING,
                     str(config["peers"]), str(config["peer_cpus"]), str(config["batch_size"]), str(config["lr"]),
                     ", ".join(str(s) for s in group.seeds()), status_of(group), fault_tolerance_of(group)])
    return Table("Configurations", ["rank", "configuration", "strategy", "strategy knobs", "peers", "CPUs/peer",
                                    "batch/peer", "lr", "seeds", "status", "fault tolerance"], rows,
                 "One row per configuration; repeats (same configuration, different seed) are combined: "
                 "figures below are mean ± standard deviation over them. Fault tolerance: see Failures.")


def speedup_cell(group: Group) -> str:
    if group.baseline is group:
        return "the baseline"
    if group.baseline is None:
        return f"no single baseline with {cpus(group.first.total_cpus)}"
    return f"{interval_text(group.speedup)} (vs {group.baseline.label})"


def scaling_cell(group: Group) -> str:
    if group.one_peer is group:
        return MISSING
    if group.one_peer is None:
        return f"no single run with 1 peer of {cpus(group.first.config['peer_cpus'])}"
    return f"{interval_text(group.efficiency, '')} (vs {group.first.config['peers']} x {group.one_peer.label})"


def repeats_unit(group: Group) -> str:
    """What the group's repeats are: "blocks" of a multirun, else "runs"."""
    return "blocks" if all(r.config.get("block") is not None for r in group.runs) else "runs"


def reached_cell(group: Group) -> str:
    reached, runs = reached_count(group)
    return f"{reached} of {runs} {repeats_unit(group)}"


def speed_table(groups: list[Group], primary: Primary) -> Table:
    rows = []
    for rank, group in enumerate(groups, 1):
        convergence = (["n/a (synthetic)"] * 6 if not primary.is_time else
                       [reached_cell(group), interval_stat(group, lambda r: r.summary.time_to_target_s),
                        number(mlperf_time(group)),
                        interval_stat(group, lambda r: r.summary.samples_to_target, lambda v: f"{v:.0f}"),
                        interval_stat(group, lambda r: r.summary.time_per_sample_s, lambda v: number(1000 * v)),
                        stat(group, lambda r: r.worst_worker_accuracy(), percent)])
        rows.append([str(rank), group.label, stat(group, lambda r: r.summary.wall_s),
                     stat(group, lambda r: r.summary.throughput_samples_per_s), speedup_cell(group),
                     scaling_cell(group), *convergence])
    target = f"Target: {primary.target}, estimator {primary.estimator}; " if primary.is_time else ""
    return Table("Time, throughput and convergence",
                 ["rank", "configuration", "wall time (s)", "global throughput (samples/s)",
                  "throughput speedup vs single (x)", "scaling efficiency", "reached the target",
                  "time-to-target of the runs that reached it (s)", "MLPerf-style time-to-target (s)",
                  "samples-to-target", "time per sample (ms)", "worst worker's final test accuracy (%)"], rows,
                 rank_note(primary) + " Wall time: launch to end of the run, as seen by the launcher. Throughput: all "
                 f"workers' samples trained in the measurement window{window_steps(groups)} / the longest worker's "
                 "training time in it (pauses to save weights for evaluation and to time the speed reference "
                 "excluded). Throughput speedup (beside the primary figure, never in its place): throughput / that of "
                 "the equal-resource baseline: the `single` run with as many CPUs in total (peers x CPUs/peer) on the "
                 "same data, model and batch size. Scaling efficiency: throughput / (peers x that of the `single` run "
                 "with 1 peer of the same CPUs). Both paired by block: geometric mean over blocks [95 % t-interval on "
                 f"the log ratios]. {target}time-to-target = samples-to-target (all workers' samples; depends on the "
                 "seed, not the machine, for synchronous strategies) x time per sample (the machine's share): the "
                 "worst worker's crossing, interpolated between evaluations and holding at the next one "
                 "(summary.json's time_to_target_s, samples_to_target, time_per_sample_s): geometric mean over the "
                 "runs that reached the target [95 % t-interval on the logs], which leaves the misses out: the "
                 "comparisons count them (Comparisons). MLPerf-style: the olympic mean over blocks (fastest and "
                 f"slowest dropped), a miss counted as the slowest (∞: more than one miss). {resolution(groups)} Worst "
                 "worker: the lowest final test accuracy over workers. '(k/n)', '(k of n blocks)': only k of n "
                 "repeats have the figure.")


def resolution(groups: list[Group]) -> str:
    """How finely time-to-target is resolved: one test sample, and the evaluation interval of each configuration."""
    evaluations = [(g.label, g.first.summary.evaluation) for g in groups]
    found = [(label, e) for label, e in evaluations if e.interval_steps and e.test_samples]
    if not found or not (tests := found[0][1].test_samples):
        return ""
    intervals = "; ".join(f"{label} every {e.interval_steps} steps = {e.interval_samples:,} samples"
                          for label, e in found)
    modes = {mode: [label for label, e in evaluations if (e.mode or "after_training") == mode]
             for mode in ("in_training", "after_training")}
    when = "; ".join(f"{MODE_TEXT[mode]}: {', '.join(labels)}" for mode, labels in modes.items() if labels)
    confirms = sorted({e.confirm_after_steps for _, e in evaluations if e.confirm_after_steps})
    confirm = (f" A snapshot at which every worker was at the target, but not all had confirmed it, is followed by one "
               f"{' or '.join(map(str, confirms))} steps later." if confirms else "")
    return (f"Resolution: one test sample = 1/{tests} = {100 / tests:.2f} points of accuracy; evaluations "
            f"(before interpolation): {intervals}. {when}.{confirm}")


MODE_TEXT = {"in_training": "evaluated in training's pauses, the run ending at its confirmed crossing",
             "after_training": "evaluated after training, the run going on to max_steps"}


def window_steps(groups: list[Group]) -> str:
    """The measurement windows of the runs (steps first-last), as the caption states them."""
    windows = sorted({(w.first, w.last) for g in groups for r in g.runs if (w := r.summary.window)})
    return f" (steps {', '.join(f'{a}-{b}' for a, b in windows)}: after warm-up, whole averaging periods)" \
        if windows else ""


def accuracy_cost_cell(group: Group, synthetic: bool) -> str:
    """The worst worker's final accuracy minus its baseline's in points, mean over the blocks holding both."""
    if synthetic:
        return "n/a (synthetic)"
    if group.first.is_baseline:
        return MISSING
    if group.baseline is None:
        return f"no single baseline with {cpus(group.first.total_cpus)}"
    if not group.accuracy_change:
        return "n/a (no paired block)"
    blocks = len(group.accuracy_change)
    return (f"{100 * statistics.fmean(group.accuracy_change):+.1f} ({counted(blocks, 'block')}, "
            f"vs {group.baseline.label})")


BYTES = ("bytes_sent_per_step", "bytes_recv_per_step", "bytes_sent_per_sample", "bytes_recv_per_sample")


def bytes_table(groups: list[Group], synthetic: bool) -> Table:
    rows = [[group.label, *(stat(group, lambda r: getattr(r.summary, k)) for k in BYTES),
             accuracy_cost_cell(group, synthetic), (group.first.summary.network_scope or MISSING)]
            for group in groups]
    return Table("Communication payload",
                 ["configuration", "sent per worker per step (bytes)", "received per worker per step (bytes)",
                  "sent per sample (bytes)", "received per sample (bytes)",
                  "accuracy vs baseline (points)", "network counters"], rows,
                 "Payload bytes counted in each strategy's send path (for library collectives, the ring's share "
                 "2(N-1)/N of the bytes counted as handed to the library; no protocol headers), mean over all workers "
                 "and steps; per sample = per step / batch per peer. Accuracy vs baseline: the worst worker's final "
                 "test accuracy minus that of the equal-resource baseline (the speedup's), in percentage points, per "
                 "block where both completed, mean over those blocks (their number and the baseline in brackets); "
                 "negative: accuracy lost for the bytes.")


def share_of(group: Group, phase: str) -> float | None:
    return group.mean(lambda r: (r.summary.time_breakdown_share or {}).get(phase))


BOTTLENECKS = {"data": ("data_s",), "compute": ("compute_s", "opt_s"), "communication": ("comm_s",),
               "waiting": ("wait_s",)}


def bottleneck(group: Group) -> tuple[str, float] | None:
    """What dominates the step (data loading, compute with the optimizer update, communication or waiting), with its
    share."""
    shares = {name: sum(share_of(group, p) or 0.0 for p in phases) for name, phases in BOTTLENECKS.items()}
    name = max(shares, key=shares.__getitem__)
    return (name, shares[name]) if shares[name] > 0 else None


def breakdown_table(groups: list[Group]) -> Table:
    rows = []
    for group in groups:
        shares = [stat(group, lambda r: (r.summary.time_breakdown_share or {}).get(p), percent) for p in PHASES]
        step_ms = stat(group, lambda r: sum(v for v in (r.summary.time_breakdown_s or {}).values() if v)
                       or None, lambda v: number(1000 * v))
        hidden_ms = stat(group, lambda r: r.summary.hidden_comm_s, lambda v: number(1000 * v))
        found = bottleneck(group)
        rows.append([group.label, *shares, step_ms, hidden_ms,
                     f"{found[0]} ({percent(found[1])} %)" if found else MISSING])
    return Table("Time breakdown per step (the bottleneck view)",
                 ["configuration", "data (%)", "compute (%)", "exposed comm (%)", "optimizer (%)", "waiting (%)",
                  "step time (ms)",
                  "hidden comm (ms)", "bottleneck"], rows,
                 "Mean per step over all workers (summary.json's time_breakdown_s and time_breakdown_share, "
                 "defined in Methods); optimizer = the optimizer update wherever it runs (a parameter server's, "
                 "hivemind's global step); exposed comm = measured communication, 0 in a step that sent and received "
                 "nothing; waiting = the rest (the training thread's waits for a CPU that other processes took, and a "
                 "step's time beyond data, compute and optimizer where it did not communicate). Shares of the summed "
                 "step time. Hidden comm: link time that ran behind compute (DDP, Horovod), not in the step's sum. "
                 "Bottleneck: the largest of data, compute (compute + optimizer), exposed communication and waiting.")


def wall_phases_table(groups: list[Group]) -> Table | None:
    rows = []
    for group in groups:
        if not (medians := group.median_phases()):
            continue
        wall = sum(medians.values())
        others = sorted((p for p in medians if p != "training_s"), key=medians.__getitem__, reverse=True)[:3]
        rows.append([group.label, str(sum(bool(r.summary.wall_phases_s) for r in group.runs)), number(wall),
                     f"{number(medians['training_s'])} ({percent(medians['training_s'] / wall)} %)",
                     ", ".join(f"{phase_name(p)} {number(medians[p])}" for p in others)])
    if not rows:
        return None
    return Table("Where the wall time went", ["configuration", "runs", "job (s)", "training (s, share)",
                                              "largest other phases (s)"], rows,
                 "Medians over the configuration's runs of each phase of summary.json's wall_phases_s (real seconds, "
                 "defined in Methods); job = the sum of those medians.")


def resources_table(groups: list[Group]) -> Table:
    rows = []
    for group in groups:
        for run in group.runs:
            for peer in run.peer_summaries():
                role = (peer.result or {}).get("role", MISSING)
                cores = (peer.result or {}).get("cores")
                rows.append([group.label, str(run.config.get("seed")), str(peer.rank), role,
                             ", ".join(map(str, cores)) if cores else MISSING, mib(peer.peak_rss_bytes),
                             number(peer.mean_cpu_percent), mib(peer.net_tx_bytes),
                             mib(peer.lo_tx_bytes), mib(peer.disk_read_bytes)])
    return Table("Resources per peer",
                 ["configuration", "seed", "rank", "role", "cores", "peak RSS (MiB)", "mean CPU (%)",
                  "net tx (MiB)", "loopback tx (MiB)", "disk read (MiB)"], rows,
                 "Sampler every sampler.interval seconds over the peer's process tree: peak RSS = max of the summed "
                 "RSS; CPU% = CPU time per interval (100 = one core). Network and disk: last minus first sample of "
                 "cumulative counters; network counters are those of the peer's network namespace (see 'network "
                 "counters' above: host-wide on loopback, i.e. shared by all peers and other traffic on the host).")


def error_headline(error: str | None) -> str | None:
    """First and last line of an error (for a traceback: who failed, and the exception)."""
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    if not lines:
        return None
    return lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"


def failure_counters(run: Run) -> dict[str, float | str]:
    """The peer figures the run's strategy declared as failure counters (summary.json's failure_counters)."""
    declared = set(run.summary.failure_counters or ())
    return {k: v for k, v in run.strategy_figures().items() if k in declared}


def attempt_status(run: Run) -> str:
    status = (run.summary.status or "?")
    return status if run.attempt == "current" else f"{status}, {run.attempt}"


def failures_table(groups: list[Group]) -> Table:
    rows = []
    for group in groups:
        for run in [*group.runs, *group.attempts]:
            summary = run.summary
            counters = ", ".join(f"{k}={number(v) if isinstance(v, float) else v}"
                                 for k, v in failure_counters(run).items())
            block = run.config.get("block")
            rows.append([group.label, MISSING if block is None else str(block), str(run.config.get("seed")),
                         attempt_status(run), str(summary.exit_code),
                         MISSING if summary.failed_rank is None else str(summary.failed_rank),
                         ", ".join(map(str, summary.lost_peers or [])) or MISSING,
                         fault_tolerance(summary), counters or MISSING,
                         error_headline(summary.error) or MISSING])
    return Table("Failures", ["configuration", "block", "seed", "status", "exit code", "failed rank", "lost peers",
                              "fault tolerance", "strategy failure counters", "error"], rows,
                 "Every run and every attempt: an attempt the sweep moved aside (below superseded/, to run the job "
                 "again in its block) stays here with its status and error; a block's first attempt counts, those "
                 "after it are marked 'not counted'. From summary.json (status, error, failed rank, "
                 "peers lost during the run) and the strategy's own counters (the peers[*].result.strategy fields it "
                 "declares as failure counters, mean over peers). Full errors below. Fault tolerance, for runs with an "
                 "injected fault (fault.*): 'survived' when the run completed without the faulty peer, else 'failed in "
                 "T s', T = time from the fault (the peer's clock just before acting) to the launcher deciding the "
                 "run's outcome; '–' = no fault injected.")


def strategy_figure_cell(group: Group, key: str) -> str:
    values = [r.strategy_figures().get(key) for r in group.runs]
    if any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return stat(group, lambda r: v if isinstance(v := r.strategy_figures().get(key), float) else None)
    return ", ".join(sorted({str(v) for v in values if v is not None})) or MISSING


def strategy_table(groups: list[Group]) -> Table | None:
    keys = sorted({k for g in groups for r in g.runs for k in r.strategy_figures()})
    if not keys:
        return None
    rows = [[g.label] + [strategy_figure_cell(g, k) for k in keys] for g in groups]
    return Table("Strategy figures", ["configuration", *keys], rows,
                 "The strategy's own end-of-run figures (peers[*].result.strategy, nested keys joined by '.'), "
                 "mean over peers; units as named by each field.")


def rounds_table(groups: list[Group]) -> Table | None:
    """Strategies that record their averaging rounds one by one (summary.json averaging_rounds: hivemind)."""
    rows = []
    for group in groups:
        recorded = [r.summary.averaging_rounds for r in group.runs if r.summary.averaging_rounds]
        workers = str(group.first.summary.workers)
        for kind in sorted({k for section in recorded for k in section.group_sizes}):
            sizes: dict[str, int] = {}
            for section in recorded:
                for size, count in section.group_sizes.get(kind, {}).items():
                    sizes[size] = sizes.get(size, 0) + count
            rounds = [r for section in recorded for r in section.rounds if r["kind"] == kind]
            total = sum(sizes.values())
            rows.append([group.label, kind, str(total),
                         ", ".join(f"{n}: {count}" for n, count in sorted(sizes.items(), key=lambda i: int(i[0]))),
                         percent(sizes.get(workers, 0) / total if total else None),
                         str(sum(not r["success"] for r in rounds)),
                         number(sum(r["duration_s"] for r in rounds) / len(rounds) if rounds else None)])
    if not rows:
        return None
    return Table("Averaging rounds", ["configuration", "kind", "rounds", "group size: rounds", "whole swarm",
                                      "failed", "mean all-reduce s"], rows,
                 "One record per averaging round (summary.json averaging_rounds, joined across the members by the "
                 "group's id), all runs of the configuration together: each round counted once, not once per "
                 "member; whole swarm = share of rounds whose group held every worker; all-reduce time excludes "
                 "matchmaking (real seconds).")


def claim_cell(c: Comparison, comparisons: list[Comparison]) -> str:
    """A comparison's claim; a control arm's (one test in the family): whether Holm's correction rejects ratio 1."""
    if c in comparisons:
        return c.decision
    return "control: " + ("differs from 1" if c.adjusted_p is not None and c.adjusted_p < ALPHA else "within noise")


def answer_table(comparisons: list[Comparison], control: list[Comparison]) -> Table:
    """The first screen's table: every comparison's ratio, interval and claim."""
    return Table("Comparisons", ["configuration", "against", "ratio [95 % interval]", "claim"],
                 [[c.this.label, c.other.label, interval_text(c.ratio), claim_cell(c, comparisons)]
                  for c in [*comparisons, *control]])


def left_out_cell(c: Comparison) -> str:
    blocks = sorted({str(r.block) for r in c.left_out})
    return f"{counted(len(c.left_out), 'run')} (block {', '.join(blocks)})" if c.left_out else MISSING


def comparisons_table(comparisons: list[Comparison], control: list[Comparison]) -> Table:
    rows = [[c.this.label, c.other.label, interval_text(c.ratio),
             f"{c.test} ({c.claim})" if c.p is not None else MISSING, number(c.p, 2),
             number(c.adjusted_p, 2),
             claim_cell(c, comparisons), left_out_cell(c)] for c in [*comparisons, *control]]
    return Table("Comparisons (declared before the data)",
                 ["configuration", "against", "ratio [95 % interval]", "test (claim tested)", "p",
                  "Holm-adjusted p", "claim", "left out (unfaithful)"], rows,
                 "Ratio > 1: the configuration is the faster (time-to-target: the other's / its own; throughput: its "
                 "own / the other's), paired by block, a miss (or failure) censored at its horizon; ≤ / ≥: a bound, "
                 "every block censored on one side. Every configuration against its equal-resource baseline and every "
                 "pair of configurations: one Holm family per section, fixed by the configurations before any result, "
                 "both tests of each comparison (t-test and TOST) in it. The control arm (the baseline run twice in "
                 "each block) is the noise floor, its test of ratio 1 in the family. Left out: unfaithful runs, whose "
                 "blocks leave every comparison they are in (each with the figure that failed: Caveats). See Methods "
                 "for the estimator and the tests.")


def section_tables(groups: list[Group], primary: Primary, comparisons: list[Comparison],
                   control: list[Comparison]) -> list[Table]:
    tables = [configuration_table(groups), speed_table(groups, primary), comparisons_table(comparisons, control),
              bytes_table(groups, not primary.is_time), breakdown_table(groups), wall_phases_table(groups),
              resources_table(groups),
              failures_table(groups), rounds_table(groups), strategy_table(groups)]
    return [t for t in tables if t is not None]

"""Cost-model validation: predicted / measured step time - 1, per strategy, peer count and link rate,
calibrated on N = 2 and validated on peer counts the models were not fitted to.

    python bench/run.py projection                      # the full grid (below)
    python bench/run.py projection --projection-grid "rates=20 peers=2,4,8 strategies=ps,stepwise"
    python bench/run.py projection --projection-grid "rates=20 peers=2,4 strategies=allreduce model=resnet18 steps=5"

For each model, link rate and strategy (every synchronous averaging strategy of the registry,
Strategy.synchronous, with ring on Horovod's MPI controller; the others, hivemind, where asked for;
with what each declares a benchmark's few steps need, Strategy.benchmark_overrides), `steps` steps run at each N, every process on its own
emulated host (network=emulated, tc tbf links). model=mlp (the default) is the payload model, its
width set per rate so that S/beta is 0.3-0.4 s; model=resnet18 (or any other conf/model option) runs
as configured, its payload fixed (ResNet18: about 45 MB). The N=2 run is the calibration case:
metrics.projection.project.measure takes its compute per step, hidden communication, server update and S (its
payload through the strategy's payload relation) and fits the strategy's overlap share where it has
one (ps), not its communication time. Every other N is a held-out case: predicted from the N=2 run
alone. beta is the link's payload rate through the one conversion every projection uses
(metrics.projection.link.payload_rate: the nominal rate x the payload share bench/results.json records in
link_goodput, bench/goodput.py), so that what is validated here is what a user's projection computes.
Predicted: the strategy's cost model (step_time, strategies/cost_models/<name>.py) at the case's N, that beta,
alpha = 0 (no netem here). Measured: the case run's period (mean over workers of each worker's mean step
over steps 2..last, evaluations excluded). error = predicted / measured - 1. A probe of N hosts, each
sending one TCP stream to the next at once for `probe_s` seconds (bench/goodput.py), decides before the
case runs whether this machine can emulate N links of that rate: a case is counted when each of the N
streams got at least LINK_BOUND of the rate, else it is not counted (the CPU, not the link, would set the
pace) and not run (the N=2 case still runs: it calibrates the others). Figures: every case's error, and
the worst and median |error|, for held-out counted cases apart from calibration cases; a case is counted
or not, never both; per strategy, a verdict: its goal met or missed, with its worst held-out case (the
projection gives no number for a strategy whose verdict is missed). A case whose run fails (or outlasts
its timeout) is kept as a row with the end of its error ("failed"), not counted, and the benchmark goes
on; a failed N=2 case leaves its strategy's held-out cases unrun (nothing to calibrate on). Rows saved
before the conversion existed carry beta from the 2-host probe of their own day (beta_source).

Saving (bench/run.py calls merge): a case is (model, link rate, strategy, N). The rows of a new run
replace only the saved rows of the same cases; the others are kept, each with its own measured_at
(and machine), so a reduced rerun adds to the table instead of erasing it. The figures and goals
are recomputed over every kept row, together and per model (by_model). Rows saved before the model
key existed were all model=mlp.
"""
import itertools
import statistics
import subprocess
import sys
import time

from bench.goodput import probe
from bench.jobs import add_grid_option, averaging_strategies, grid_settings, ints, synchronous_strategies, train
from metrics.projection.evidence import load_evidence
from metrics.projection.link import Link, payload_rate
from metrics.projection.project import measure
from metrics.summary.bounds import MBIT

STRATEGIES = averaging_strategies(tweaks={
    "ring": ["ring.controller=mpi"],
    "hivemind": ["hivemind.matchmaking_time=2", "hivemind.request_timeout=1", "hivemind.target_batch_size=256"]})
SYNCHRONOUS = synchronous_strategies()
GOALS = {"synchronous": 0.15, "median": 0.07, "asynchronous": 0.25}  # |error| of held-out counted cases
DEFAULT_GRID = f"rates=20,100 peers=2,4,8,16 strategies={','.join(SYNCHRONOUS)} model=mlp steps=10"
PAYLOAD_MODEL = "mlp"  # its width is set per rate; other models run as configured
WIDTHS = {20: 320, 100: 864, 1000: 1728}  # S = 0.75, 3.9, 13.8 MB (float32 gradients of model=mlp)
UNSTAMPED_MODEL = "mlp"  # rows saved before rows carried their model: the grid had model=mlp only
CASE_TIMEOUT_S = 900     # a case's run at least; a held-out case: also 3x its predicted steps
FAILURE_CHARS = 600  # the end of a failed case's error kept in its row
LINK_BOUND = 0.85  # share of the rate each of N concurrent probe streams must get for a case to test the link


def error(predicted: float, measured: float) -> float:
    return predicted / measured - 1


def figures(rows: list[dict]) -> dict:
    """Worst and median |error| over the rows and per strategy; the share within 15 %."""
    if not rows:
        return {"cases": 0}

    def stats(errors: list[float]) -> dict:
        worst = max(errors, key=abs)
        return {"cases": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
                "worst_error": worst, "within_15_percent": sum(abs(e) <= 0.15 for e in errors) / len(errors)}

    by_strategy = {s: stats([r["error"] for r in rows if r["strategy"] == s])
                   for s in dict.fromkeys(r["strategy"] for r in rows)}
    return stats([r["error"] for r in rows]) | {"by_strategy": by_strategy}


def summarize(rows: list[dict]) -> dict:
    """summarize_cases over all the rows, and over each model's rows apart (by_model)."""
    models = dict.fromkeys(r.get("model", UNSTAMPED_MODEL) for r in rows)
    return summarize_cases(rows) | {"by_model": {m: summarize_cases([r for r in rows
                                                                     if r.get("model", UNSTAMPED_MODEL) == m])
                                                 for m in models}}


def summarize_cases(rows: list[dict]) -> dict:
    """Held-out counted cases (what the goals judge), calibration cases apart, and the cases not counted."""
    held_out = [r for r in rows if r["role"] == "held-out" and r["counted"]]
    synchronous = [r for r in held_out if r["strategy"] in SYNCHRONOUS]
    asynchronous = [r for r in held_out if r["strategy"] not in SYNCHRONOUS]
    goals_met = {
        "every synchronous held-out case within 15 %": all(abs(r["error"]) <= GOALS["synchronous"]
                                                           for r in synchronous),
        "median synchronous held-out |error| <= 7 %": bool(synchronous) and statistics.median(
            abs(r["error"]) for r in synchronous) <= GOALS["median"],
    }
    if asynchronous:
        goals_met["every asynchronous held-out case within 25 %"] = all(abs(r["error"]) <= GOALS["asynchronous"]
                                                                        for r in asynchronous)
    calibration = [r for r in rows if r["role"] == "calibration" and "failed" not in r]
    return {"held_out": figures(held_out), "calibration": figures(calibration), "verdicts": verdicts(held_out),
            "not_counted": [{"model": r.get("model", UNSTAMPED_MODEL)}
                            | {k: r[k] for k in ("strategy", "peers", "link_mbit", "probe_mbit_per_stream", "failed")
                               if k in r}
                            for r in rows if not r["counted"]],
            "goals_met": goals_met}


def goal_of(strategy: str) -> float:
    """The largest held-out |error| a strategy's model may show: GOALS by whether its workers step in lockstep."""
    return GOALS["synchronous"] if strategy in SYNCHRONOUS else GOALS["asynchronous"]


def verdicts(held_out: list[dict]) -> dict:
    """Per strategy: its goal, whether every held-out counted case met it, and its worst case."""
    found = {}
    for strategy in dict.fromkeys(r["strategy"] for r in held_out):
        worst = max((r for r in held_out if r["strategy"] == strategy), key=lambda r: abs(r["error"]))
        found[strategy] = {"goal": goal_of(strategy), "met": abs(worst["error"]) <= goal_of(strategy),
                           "worst": {"error": worst["error"], "peers": worst["peers"], "link_mbit": worst["link_mbit"],
                                     "model": worst.get("model", UNSTAMPED_MODEL)}}
    return found


def width(model: str, rate: int) -> int | None:
    """model=mlp's width at this link rate (WIDTHS); None for a model that runs as configured."""
    return WIDTHS[rate] if model == PAYLOAD_MODEL else None


def model_overrides(model: str, rate: int) -> list[str]:
    return [f"model={model}"] + ([f"model.width={width(model, rate)}"] if model == PAYLOAD_MODEL else [])


def run_case(model: str, strategy: str, peers: int, rate: int, steps: int, payload_share: float, timeout: float):
    # a collective may take as long as the case: ResNet18's start-up broadcast (45 MB from rank 0 to N - 1 peers
    # through its one emulated link) outlasts the default 60 s at 20 Mbit/s and N = 8
    with train(*STRATEGIES[strategy], f"peers={peers}", "network=emulated", f"network.bandwidth_mbit={rate}",
               *model_overrides(model, rate), f"max_steps={steps}", "eval_every=0",
               f"timeouts.collective_s={int(timeout)}", timeout=timeout) as run_dir:
        return measure(run_dir, payload_share)


def grid(text: str | None = None) -> dict:
    """`rates=20,100 peers=2,4,8,16 strategies=ps,ring model=mlp steps=10` (DEFAULT_GRID where a key is missing;
    model may list several, e.g. model=mlp,resnet18)."""
    from launchers.config import group_options

    settings = grid_settings(DEFAULT_GRID, "--projection-grid", text)
    models = settings["model"].split(",")
    unknown = [m for m in models if m not in group_options("model")]
    if unknown:
        raise ValueError(f"--projection-grid: unknown model {', '.join(unknown)} "
                         f"(choose from: {', '.join(group_options('model'))})")
    return {"rates": ints(settings["rates"]), "peers": sorted({2, *ints(settings["peers"])}),
            "strategies": settings["strategies"].split(","), "models": models, "steps": int(settings["steps"])}


def case_key(row: dict) -> tuple:
    """What a row measured: (model, link rate, strategy, N)."""
    return row.get("model", UNSTAMPED_MODEL), row["link_mbit"], row["strategy"], row["peers"]


def figures_of(rows: list[dict]) -> dict:
    """The entry's figures over these rows: ratio (held-out median |error|, all models) and summarize's."""
    summary = summarize(rows)
    return {"ratio": summary["held_out"].get("median_abs_error"), **summary}


def merge(kept: dict, new: dict) -> dict:
    """The saved entry and a new run's: the new rows replace the kept rows of the same cases (case_key), the
    kept rows of other cases stay with their own measured_at and machine (a row without them gets its entry's;
    without a model, UNSTAMPED_MODEL), and the figures are recomputed over all of them."""
    def stamped(entry: dict) -> list[dict]:
        defaults = {"model": UNSTAMPED_MODEL, "measured_at": entry.get("measured_at"), "machine": entry.get("machine")}
        return [defaults | row for row in entry.get("rows", [])]

    new_rows = stamped(new)
    replaced = {case_key(r) for r in new_rows}
    still = [r for r in stamped(kept) if case_key(r) not in replaced]
    earlier = kept.get("earlier_runs", []) + [{k: kept.get(k) for k in ("measured_at", "machine", "setup")}]
    return new | figures_of(still + new_rows) | {"rows": still + new_rows,
                                                  "earlier_runs": earlier if still else []}


def failed_row(model: str, strategy: str, peers: int, rate: int, failure: Exception, probes: list[float]) -> dict:
    """A case whose run failed: kept with the end of its error, never counted (it has no error figure)."""
    return {"model": model, "strategy": strategy, "peers": peers, "link_mbit": rate,
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "role": "calibration" if peers == 2 else "held-out", "counted": False,
            "failed": str(failure).strip()[-FAILURE_CHARS:], "probe_mbit_per_stream": min(probes),
            "probe_streams": peers}


def add_arguments(parser) -> None:
    add_grid_option(parser, "projection", DEFAULT_GRID)


def run(text: str | None = None, probe_s: float = 3.0) -> dict:
    chosen = grid(text)
    share = load_evidence().payload_share
    rows = []
    for rate in chosen["rates"]:
        probes = {n: probe(n, rate, probe_s) for n in chosen["peers"]}
        link = Link(f"{rate} Mbit/s", rate, 0.0, "the case's emulated link")
        counted = {n: min(probes[n]) >= LINK_BOUND * rate for n in chosen["peers"]}
        for model, strategy in itertools.product(chosen["models"], chosen["strategies"]):
            calibration = None
            for n in chosen["peers"]:
                if not counted[n] and n != 2:
                    print(f"  {model} {strategy} N={n} {rate} Mbit/s: not run ({min(probes[n]):.0f} Mbit/s per "
                          f"stream < {LINK_BOUND:.0%} of the rate)", file=sys.stderr, flush=True)
                    continue
                print(f"  {model} {strategy} N={n} {rate} Mbit/s ...", file=sys.stderr, flush=True)
                timeout = max(CASE_TIMEOUT_S, 3 * (chosen["steps"] + 1) * calibration.step_s(n, link)) \
                    if calibration else CASE_TIMEOUT_S
                try:
                    case = run_case(model, strategy, n, rate, chosen["steps"], share, timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as failure:
                    rows.append(failed_row(model, strategy, n, rate, failure, probes[n]))
                    print(f"  {model} {strategy} N={n} {rate} Mbit/s failed: not counted"
                          + ("; its held-out cases not run (nothing to calibrate on)" if n == 2 else ""),
                          file=sys.stderr, flush=True)
                    if n == 2:
                        break
                    continue
                calibration = calibration or case
                predicted = calibration.step_s(n, link)
                rows.append({
                    "model": model, "strategy": strategy, "peers": n, "link_mbit": rate, "width": width(model, rate),
                    "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "role": "calibration" if n == 2 else "held-out", "counted": counted[n],
                    "latency_ms": link.latency_ms, "beta_mbit": payload_rate(link, share) / MBIT,
                    "beta_source": f"nominal x payload share {share:.3f} (bench/results.json link_goodput)",
                    "compute_s": calibration.compute_s, "hidden_s": calibration.hidden_s,
                    "server_s": calibration.server_s, "overlap": calibration.overlap,
                    "size_bytes": calibration.size_bytes,
                    "predicted_step_s": predicted, "measured_step_s": case.measured_step_s,
                    "error": error(predicted, case.measured_step_s),
                    "probe_mbit_per_stream": min(probes[n]), "probe_streams": n,
                })
    sizes = "; ".join(f"model={m} width {WIDTHS} by rate" if m == PAYLOAD_MODEL else f"model={m} as configured"
                      for m in chosen["models"])
    return {
        "name": "projection_validation",
        "goal": f"held-out |error| <= 0.15 every synchronous case ({', '.join(SYNCHRONOUS)}), median <= 0.07; "
                f"asynchronous ({', '.join(sorted(set(STRATEGIES) - set(SYNCHRONOUS)))}) <= 0.25",
        **figures_of(rows),
        "rows": rows,
        "setup": f"{sizes}, {chosen['steps']} steps, N={chosen['peers']}, links {chosen['rates']} Mbit/s, "
                 f"strategies {chosen['strategies']}; calibration: the N=2 run of the same model, strategy and rate; "
                 f"{time.strftime('%Y-%m-%d')}",
        "method": __doc__.strip(),
    }

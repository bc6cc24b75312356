"""Cost-model validation: predicted / measured step time - 1, per strategy, peer count and link rate,
calibrated on N = 2 at one link rate and validated at the other peer counts and rates."""
import functools
import itertools
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from bench.goodput import probe
from bench.jobs import averaging_strategies, grid_settings, ints, train
from launchers.config import strategy_by_name
from metrics.projection.evidence import load_evidence
from metrics.projection.link import NETWORK_PRESETS, Link, payload_rate, payload_share
from metrics.projection.project import Measured, measure
from metrics.recording.rundir import RunDir
from metrics.summary.bounds import MBIT
from metrics.summary.fidelity import unfaithful
from metrics.summary import isolation
from netemu.dilation import checked_dilation
from metrics.summary.schema import Summary

STRATEGIES = averaging_strategies("projection")
SYNCHRONOUS = [name for name in STRATEGIES if strategy_by_name(name).synchronous]  # Strategy.synchronous
GOALS = {"synchronous": 0.15, "median": 0.07, "asynchronous": 0.25}  # |error| of held-out counted cases
DEFAULT_GRID = (f"rates=20,100,150 calibration_rate=20 peers=2,4,8 strategies={','.join(SYNCHRONOUS)} model=mlp "
                "steps=10 repeats=3 dilate=fit")
DILATE = ("fit", "off")  # fit: a case whose processes outnumber the cores runs dilated until they fit; off: as is
COVERAGE_GOAL = 0.8  # faithful cases / attempted cases
PAYLOAD_MODEL = "mlp"  # its width is set per rate; other models run as configured
WIDTHS = {20: 320, 100: 864, 1000: 1728}  # S = 0.75, 3.9, 13.8 MB (float32 gradients of model=mlp)
CASE_TIMEOUT_S = 900     # a case's run at least; a held-out case: also 3x its predicted steps
FAILURE_CHARS = 600  # the end of a failed case's error kept in its row
LINK_BOUND = 0.85  # share of the rate each of N concurrent probe streams must get for a case to test the link
BEFORE_CHECKS = "measured before runs were checked for fidelity"  # why a kept row stopped counting (merge)


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
    models = dict.fromkeys(r["model"] for r in rows)
    return summarize_cases(rows) | {"by_model": {m: summarize_cases([r for r in rows if r["model"] == m])
                                                 for m in models}}


def coverage(rows: list[dict]) -> dict:
    """Held-out cases attempted, faithful, and within their goal (rows from before fidelity checks left out)."""
    attempted = [r for r in rows if r["role"] == "held-out" and "faithful" in r]
    faithful = [r for r in attempted if r["counted"]]
    return {"attempted": len(attempted), "faithful": len(faithful),
            "within_goal": sum(abs(r["error"]) <= goal_of(r["strategy"]) for r in faithful),
            "faithful_share": len(faithful) / len(attempted) if attempted else None,
            "faithful_dilated": sum((r.get("dilation") or 1) > 1 for r in faithful)}


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
    cases = coverage(rows)
    goals_met[f"faithful cases >= {COVERAGE_GOAL:.0%} of attempted"] = (cases["faithful_share"] or 0) >= COVERAGE_GOAL
    calibration = [r for r in rows if r["role"] == "calibration" and "failed" not in r]
    return {"held_out": figures(held_out), "calibration": figures(calibration),
            "verdicts": verdicts(held_out) | unchecked_verdicts(rows, held_out),
            "coverage": cases,
            "not_counted": [{"model": r["model"]}
                            | {k: r[k] for k in ("strategy", "peers", "link_mbit", "probe_mbit_per_stream", "failed",
                                                 "not_run", "unfaithful") if k in r}
                            for r in rows if not r["counted"]],
            "goals_met": goals_met, "goal_met": all(goals_met.values())}


def goal_of(strategy: str) -> float:
    """The largest held-out |error| a strategy's model may show: GOALS by whether its workers step in lockstep."""
    return GOALS["synchronous"] if strategy in SYNCHRONOUS else GOALS["asynchronous"]


def unchecked_verdicts(rows: list[dict], held_out: list[dict]) -> dict:
    """The verdicts of strategies judged only by cases from before fidelity checks (checked: false)."""
    judged = {r["strategy"] for r in held_out}
    before = [r for r in rows if r["role"] == "held-out" and "error" in r and "faithful" not in r
              and r["strategy"] not in judged]
    return {strategy: verdict | {"checked": False} for strategy, verdict in verdicts(before).items()}


def verdicts(held_out: list[dict]) -> dict:
    """Per strategy: its goal, whether every held-out counted case met it, and its worst case."""
    found = {}
    for strategy in dict.fromkeys(r["strategy"] for r in held_out):
        worst = max((r for r in held_out if r["strategy"] == strategy), key=lambda r: abs(r["error"]))
        found[strategy] = {"goal": goal_of(strategy), "met": abs(worst["error"]) <= goal_of(strategy),
                           "worst": {"error": worst["error"], "peers": worst["peers"], "link_mbit": worst["link_mbit"],
                                     "model": worst["model"]}, "checked": True}
    return found


def width(model: str, rate: int) -> int | None:
    """model=mlp's width sized for this link rate (WIDTHS); None for a model that runs as configured."""
    if model != PAYLOAD_MODEL:
        return None
    if rate not in WIDTHS:
        raise ValueError(f"--projection-grid: model=mlp is sized for a calibration rate of {', '.join(map(str, WIDTHS))} "
                         f"Mbit/s, not {rate}")
    return WIDTHS[rate]


def model_overrides(model: str, mlp_width: int | None) -> list[str]:
    return [f"model={model}"] + ([f"model.width={mlp_width}"] if mlp_width else [])


@dataclass
class CaseRun:
    """One run of a case: its cost-model parameters and measured step (Measured), and whether its emulation held."""

    measured: Measured
    unfaithful: list[str]  # why the run's link or CPUs did not hold (summary.json link, isolation); empty: they held

    @property
    def faithful(self) -> bool:
        return not self.unfaithful


def dilation_to_fit(overrides: list[str]) -> float:
    """The emulate.dilation at which a case's processes get their peer_cpus here (its oversubscription, >= 1)."""
    from hydra import compose, initialize_config_dir

    from launchers.config import CONF_DIR, strategy_class
    from launchers.shape import shape_of

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "emulate.dilation=1"])
    return max(1.0, shape_of(cfg, strategy_class(cfg).launch_spec(cfg), False)["oversubscription"])


def starved(summary: Summary) -> list[str]:
    """The ranks that wanted CPU and did not get it while other processes ran on their cores, the run's own ranks
    among them. The run's own isolation check judges ranks with steps by distortion and forgives a rank without
    them the run's own ranks (a shape's oversubscription is its caveat); a validation case does not: an emulated
    host that waits for another host's process is no separate machine."""
    if summary.isolation.faithful is False:  # already marked, with its reasons
        return []
    whose = " (the run's own ranks included)"
    return ["CPU: " + isolation.starved_text(row, row.get("other_on_cores_s"), whose)
            for row in summary.isolation.by_rank
            if row.get("wait_beyond_quota_s") is not None and isolation.starved(row, row.get("other_on_cores_s"))]


def run_case(overrides: list[str], steps: int, shares: dict[int, float], timeout: float,
             dilation: float) -> CaseRun:
    # a collective may take as long as the case (ResNet18's start-up broadcast at 20 Mbit/s outlasts the default);
    # an unchecked dilation runs, and its summary says so
    dilated = [f"emulate.dilation={dilation:g}", "emulate.allow_unchecked_dilation=true"] if dilation > 1 else []
    with train(*overrides, *dilated, f"max_steps={steps}", "eval_every=0", f"timeouts.collective_s={int(timeout)}",
               timeout=timeout * dilation) as run_dir:
        summary = Summary.load(RunDir(run_dir).summary)
        return CaseRun(measure(run_dir, shares), unfaithful(summary) + starved(summary))


def grid(text: str | None = None) -> dict:
    """The grid --projection-grid asks for (DEFAULT_GRID where a key is missing; model may list several)."""
    from launchers.config import group_options

    settings = grid_settings(DEFAULT_GRID, "--projection-grid", text)
    models = settings["model"].split(",")
    if unknown := [m for m in models if m not in group_options("model")]:
        raise ValueError(f"--projection-grid: unknown model {', '.join(unknown)} "
                         f"(choose from: {', '.join(group_options('model'))})")
    calibration_rate = int(settings["calibration_rate"])
    for model in models:
        width(model, calibration_rate)  # model=mlp needs a width for it
    if settings["dilate"] not in DILATE:
        raise ValueError(f"--projection-grid: dilate is one of {', '.join(DILATE)}, not {settings['dilate']}")
    return {"rates": sorted(set(ints(settings["rates"]))), "calibration_rate": calibration_rate,
            "peers": sorted({2, *ints(settings["peers"])}), "strategies": settings["strategies"].split(","),
            "models": models, "steps": int(settings["steps"]), "repeats": int(settings["repeats"]),
            "dilate": settings["dilate"]}


def case_key(row: dict) -> tuple:
    return row["model"], row["link_mbit"], row["strategy"], row["peers"]


def figures_of(rows: list[dict]) -> dict:
    """The entry's figures over these rows: ratio (held-out median |error|, all models) and summarize's."""
    errors = summarize(rows)
    return {"ratio": errors["held_out"].get("median_abs_error"), **errors}


def merge(kept: dict, new: dict) -> dict:
    """The saved entry with a new run's rows in place of those of the same cases; figures over all the rows."""
    def unchecked(row: dict) -> dict:
        """A kept row from before runs were checked for fidelity, beside checked ones: no longer counted."""
        if "faithful" in row or not any("faithful" in r for r in new_rows):
            return row
        return row | {"counted": False, "unfaithful": [BEFORE_CHECKS]}

    new_rows = new["rows"]
    replaced = {case_key(r) for r in new_rows}
    still = [unchecked(r) for r in kept["rows"] if case_key(r) not in replaced]
    rows = sorted(still + new_rows, key=lambda r: (r["model"], r["strategy"], r["link_mbit"], r["peers"]))
    earlier = kept.get("earlier_runs", []) + [{k: kept.get(k) for k in ("measured_at", "machine", "setup")}]
    return new | figures_of(rows) | {"rows": rows, "earlier_runs": earlier if still else []}


def failed_row(peers: int, rate: int, failure: str, probes: list[float]) -> dict:
    """A case one of whose runs failed: kept with the end of its error, never counted (it has no error figure)."""
    return {"peers": peers, "link_mbit": rate, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "role": "calibration" if peers == 2 else "held-out", "counted": False, "faithful": False,
            "failed": failure, "probe_mbit_per_stream": min(probes), "probe_streams": peers}


def not_run_row(peers: int, rate: int, probes: list[float], dilation: float = 1.0) -> dict:
    """A case this machine cannot emulate: its N probe streams got under LINK_BOUND of its links' rate."""
    return {"peers": peers, "link_mbit": rate, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "role": "held-out", "counted": False, "faithful": False,
            "not_run": f"{min(probes):.0f} Mbit/s per probe stream < {LINK_BOUND:.0%} of the rate its links are built "
                       f"at ({rate / dilation:g} Mbit/s)",
            "probe_mbit_per_stream": min(probes), "probe_streams": peers, "dilation": dilation}


def case_runs(overrides: list[str], chosen: dict, shares: dict[int, float], timeout: float,
              dilation: float) -> tuple[list[CaseRun], str | None]:
    """The case's `repeats` runs, and the end of the error of the one that failed (the case then ends)."""
    runs = []
    for _ in range(chosen["repeats"]):
        try:
            runs.append(run_case(overrides, chosen["steps"], shares, timeout, dilation))
        except (RuntimeError, subprocess.TimeoutExpired) as failure:
            return runs, str(failure).strip()[-FAILURE_CHARS:]
    return runs, None


def calibrating(runs: list[CaseRun]) -> tuple[list[Measured], list[str]]:
    """The calibration runs that held (with none: all, and why their cases do not count)."""
    if held := [r.measured for r in runs if r.faithful]:
        return held, []
    return [r.measured for r in runs], ["calibration: none of its runs held its link and CPUs"]


def case_link(rate: int) -> Link:
    """A case's link: network=emulated at `rate`, in that preset's frames."""
    mtu = int(yaml.safe_load((NETWORK_PRESETS / "emulated.yaml").read_text())["mtu"])
    return Link(f"{rate} Mbit/s", rate, 0.0, "the case's emulated link", mtu)


def case_row(peers: int, rate: int, runs: list[CaseRun], calibrations: list[Measured], shares: dict[int, float],
             probes: list[float], uncalibrated: Sequence[str] = (), dilation: float = 1.0) -> dict:
    """A case that ran: the calibration runs' mean prediction against its runs' mean period, counted if all held."""
    link = case_link(rate)
    predicted = statistics.fmean(c.step_s(peers, link) for c in calibrations)
    measured = [r.measured.measured_step_s for r in runs]
    unfaithful = [f"run {i + 1}: {why}" for i, r in enumerate(runs) for why in r.unfaithful]
    return {"peers": peers, "link_mbit": rate, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "faithful": not unfaithful, "unfaithful": [*uncalibrated, *unfaithful],
            "counted": not unfaithful and not uncalibrated,
            "latency_ms": link.latency_ms, "beta_mbit": payload_rate(link, shares) / MBIT,
            "beta_source": f"nominal x payload share {payload_share(shares, link.mtu):.3f} of {link.mtu}-byte frames "
                           "(link_goodput)",
            **{key: statistics.fmean(getattr(c, key) or 0.0 for c in calibrations)
               for key in ("compute_s", "hidden_s", "server_s", "overlap", "size_bytes")},
            "wire_s": statistics.fmean(c.wire_s(peers, link) for c in calibrations),
            "wire_over_compute": statistics.fmean(c.wire_over_compute(peers, link) for c in calibrations),
            "predicted_step_s": predicted, "measured_step_s": statistics.fmean(measured),
            "measured_step_s_by_run": measured, "error": error(predicted, statistics.fmean(measured)),
            "probe_mbit_per_stream": min(probes), "probe_streams": peers, "dilation": dilation}


def run(text: str | None = None, probe_s: float = 3.0) -> dict:
    chosen = grid(text)
    shares = load_evidence().payload_shares
    calibration_rate = chosen["calibration_rate"]

    @functools.cache
    def probes(rate: float, n: int) -> list[float]:
        """N concurrent probe streams at the rate a case's links are built at (its rate / dilation), once each."""
        return probe(n, rate, probe_s)

    rows = []
    for model, strategy in itertools.product(chosen["models"], chosen["strategies"]):
        mlp_width = width(model, calibration_rate)
        mine = {"model": model, "strategy": strategy, "width": mlp_width, "calibration_link_mbit": calibration_rate}

        def say(n: int, rate: int, what: str) -> None:
            print(f"  {model} {strategy} N={n} {rate} Mbit/s{what}", file=sys.stderr, flush=True)

        def shaped(n: int, rate: int) -> tuple[list[str], float]:
            """The case's overrides and its dilation: to fit, where this machine checked that dilation."""
            overrides = [*STRATEGIES[strategy], f"peers={n}", "network=emulated", f"network.bandwidth_mbit={rate}",
                         *model_overrides(model, mlp_width)]
            fit = dilation_to_fit(overrides) if chosen["dilate"] == "fit" else 1.0
            return overrides, fit if fit <= checked_dilation(strategy)[0] else 1.0

        overrides, dilation = shaped(2, calibration_rate)
        say(2, calibration_rate, f" (calibration{f', dilated {dilation:g}x' if dilation > 1 else ''}) ...")
        runs, failure = case_runs(overrides, chosen, shares, CASE_TIMEOUT_S, dilation)
        if failure:
            rows.append(mine | failed_row(2, calibration_rate, failure, probes(calibration_rate / dilation, 2)))
            say(2, calibration_rate, " failed: its held-out cases not run (nothing to calibrate on)")
            continue
        calibrations, uncalibrated = calibrating(runs)
        rows.append(mine | {"role": "calibration"} | case_row(2, calibration_rate, runs, calibrations, shares,
                                                                probes(calibration_rate / dilation, 2),
                                                                dilation=dilation))
        for rate, n in itertools.product(chosen["rates"], chosen["peers"]):
            if (rate, n) == (calibration_rate, 2):
                continue
            overrides, dilation = shaped(n, rate)
            built = rate / dilation
            if min(probes(built, n)) < LINK_BOUND * built:
                rows.append(mine | not_run_row(n, rate, probes(built, n), dilation))
                say(n, rate, f": not run ({min(probes(built, n)):.0f} Mbit/s per stream < {LINK_BOUND:.0%} of the "
                             f"{built:g} Mbit/s its links are built at)")
                continue
            say(n, rate, f"{f' (dilated {dilation:g}x)' if dilation > 1 else ''} ...")
            link = case_link(rate)
            timeout = max(CASE_TIMEOUT_S, 3 * (chosen["steps"] + 1) * max(c.step_s(n, link) for c in calibrations))
            runs, failure = case_runs(overrides, chosen, shares, timeout, dilation)
            if failure:
                rows.append(mine | failed_row(n, rate, failure, probes(built, n)))
                say(n, rate, " failed: not counted")
                continue
            rows.append(mine | {"role": "held-out"} | case_row(n, rate, runs, calibrations, shares, probes(built, n),
                                                                 uncalibrated, dilation))
    sizes = "; ".join(f"model={m} width {width(m, calibration_rate)} (sized for {calibration_rate} Mbit/s)"
                      if m == PAYLOAD_MODEL else f"model={m} as configured" for m in chosen["models"])
    return {
        "name": "projection_validation",
        "goal": f"held-out |error| <= 0.15 every synchronous case ({', '.join(SYNCHRONOUS)}), median <= 0.07; "
                f"asynchronous ({', '.join(sorted(set(STRATEGIES) - set(SYNCHRONOUS)))}) <= 0.25; faithful cases >= "
                f"{COVERAGE_GOAL:.0%} of those attempted",
        **figures_of(rows),
        "rows": rows,
        "setup": f"{sizes}, {chosen['steps']} steps, {chosen['repeats']} runs per case, N={chosen['peers']}, "
                 f"links {chosen['rates']} Mbit/s, strategies {chosen['strategies']}; calibration: the N=2 runs at "
                 f"{calibration_rate} Mbit/s of the same model and strategy; {time.strftime('%Y-%m-%d')}",
    }

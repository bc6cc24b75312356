"""Projected step time, throughput and time-to-target at other peer counts and links.

    python -m metrics.projection RUN_DIR [RUN_DIR ...] [--peers 16 32 64 128 256]
                              [--link wan|lan|home|datacenter|MBIT[,LATENCY_MS[,MTU]] ...]
                              [--compute-s S | --samples-per-s X | --samples-per-s-per-node X] [--batch B]
                              [--devices-per-node D --intra-node-link MBIT[,LATENCY_MS]]
                              [--ps-servers K] [--ps-placement dedicated|colocated] [--gradient-mb MB] [-o OUT]

Every figure is a prediction of the strategy's cost model, with parameters from the measured runs (a run that did not
hold its link or CPU is left out and named) or your declared compute; outside the validated region it is marked
UNVALIDATED and has no band (docs/projection.md). Prints one table of the configurations by link and N; writes
projection.json and projection.png into the run's folder, or into OUT.
"""
import argparse
import json
import math
import statistics
import sys
import textwrap
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from metrics.summary.bounds import ETHERNET_MTU, MBIT, Round, round_records
from metrics.recording.jsonl import read_jsonl
from metrics.projection.batch_scaling import samples_at
from metrics.projection.cost import Cost, CostModel, first_paragraph
from metrics.projection.evidence import Evidence, Validation, load_evidence, unvalidated
from metrics.projection.link import PS_PLACEMENTS, Link, cluster_problems, parse_link, payload_rate
from metrics.projection.models import cost_model
from metrics.recording.evidence import EVIDENCE
from metrics.recording.formats import counted, number
from metrics.recording.machine import describe_machine
from metrics.recording.rundir import LaunchSpec, RunDir, run_dirs_under, run_folders, summary_folders
from metrics.summary.schema import Summary
from metrics.summary.fidelity import unfaithful
from metrics.summary.target import time_to_target
from metrics.recording.methods import methods

STOP_GAIN = 0.10     # a strategy stops scaling where doubling the peers adds less throughput than this
TITLE_POINTS = 9     # the plot's title font size

METHODS = methods("projection", STOP_GAIN=STOP_GAIN)


# --- what a run measured -------------------------------------------------------------

@dataclass
class Measured:
    """A measured run, reduced to the parameters of its strategy's cost model."""

    run: Path
    strategy: str
    model: type[CostModel]           # the strategy's cost model (its config's strategy.cost_model)
    workers: int
    batch: int                       # samples per worker and step
    knobs: dict
    compute_s: float                 # per step on a peer's own cores (corrected where the run was oversubscribed)
    compute_note: str                # how compute_s was obtained
    compute_of: str                  # whose compute it is: the run's machine, or the user's declaration
    oversubscription: float | None   # processes x threads / cores of the run (None: unknown)
    hidden_s: float                  # communication per step that ran behind backward
    server_s: float                  # one server update
    payload_bytes: float             # P
    size_bytes: float                # S
    link: Link | None                # the run's own link; None: unshaped
    measured_step_s: float
    samples_to_target: float | None
    payload_shares: dict[int, float]  # payload / nominal rate of a link by frame size (Evidence.payload_shares)
    batch_scaling: dict | None = None  # a passed noise-scale check for the run's model and lr rule (evidence.py)
    overlap: float = 0.0             # the model's overlap share, fitted on the run's own N and link (fit_overlap)
    declared: tuple[str, ...] = ()   # what the user declared instead of the run's figures ("compute", "gradient")

    def cost(self, workers: int, link: Link, overlap: float = 0.0) -> Cost:
        knobs, server_s = self.knobs, self.server_s
        if link.ps_servers and "servers" in knobs:  # ps on the cluster's servers: an update per shard, 1/k of S
            knobs = knobs | {"servers": link.ps_servers}
            server_s = self.server_s * int(self.knobs["servers"]) / link.ps_servers
        return Cost(workers, self.size_bytes, payload_rate(link, self.payload_shares), link.latency_ms / 1e3,
                    self.compute_s, self.batch, knobs, hidden=self.hidden_s, server=server_s,
                    overlap=overlap, devices_per_node=link.devices_per_node,
                    intra_node_rate=link.intra_node_mbit * MBIT, intra_node_latency=link.intra_node_latency_ms / 1e3,
                    colocated_servers=link.ps_placement == "colocated")

    def step_s(self, workers: int, link: Link) -> float:
        return self._step(self.cost(workers, link, self.overlap))

    def wire_s(self, workers: int, link: Link) -> float:
        """The model's communication per step: its step with nothing hidden behind compute and no server update, less
        the compute (the numerator of wire time over compute, an axis of the validated region)."""
        return self._step(replace(self.cost(workers, link, self.overlap), hidden=0.0, server=0.0)) - self.compute_s

    def wire_over_compute(self, workers: int, link: Link) -> float:
        return self.wire_s(workers, link) / self.compute_s if self.compute_s > 0 else math.inf

    def _step(self, cost: Cost) -> float:
        step = self.model.step_time(cost)
        if step is None:
            raise ValueError(f"{self.run}: strategy {self.strategy} states no cost model (its step_time)")
        return step


def run_link(run: RunDir, config: dict, dilation: float = 1.0) -> Link | None:
    """The slowest link of the run's emulated hosts (network.json, built at rate / dilation, in its frames; the
    latency as asked); None: loopback or an unshaped host."""
    if not run.network.exists():
        return None
    hosts = json.loads(run.network.read_text())["hosts"]
    rates = [h["bandwidth_mbit"] for h in hosts]
    if None in rates:
        return None
    latency = float(config["network"].get("latency_ms") or 0.0)
    mtu = min(int(h.get("mtu", ETHERNET_MTU)) for h in hosts)  # hosts recorded without one had the kernel's default
    return Link("measured run's link", float(min(rates)) * dilation, latency,
                f"{run.network} (slowest host{f', x the dilation {dilation:g}' if dilation != 1 else ''}), "
                "network.latency_ms", mtu)


def steady(steps: list[dict], warmup: int, period: int) -> list[dict]:
    """The steady state's steps after the cost model's warm-up, the most whole periods of `period` steps the log
    holds, led by the warm-up's last step (the origin of their time); a lone step: itself."""
    if len(steps) == 1:
        return steps
    after = [s for s in steps if s["step"] >= warmup]
    whole = (len(after) - 1) // period * period
    if whole < 1:
        raise ValueError(f"{len(steps)} steps hold no whole period of {period} after the first {warmup} (the cost "
                         "model's warm-up): run more steps")
    return after[:whole + 1]


def mean_step_s(steps: list[dict]) -> float:
    """Mean wall time of the steps after the first (steady's): train_s of the last minus that of the first, over
    the steps between (a lone step: its own train_s)."""
    if len(steps) < 2:
        return steps[0]["train_s"]
    return (steps[-1]["train_s"] - steps[0]["train_s"]) / (len(steps) - 1)


def hidden_comm_s(step: dict) -> float:
    """Communication of one step that ran behind backward: hidden_comm_s where logged, else link_s - comm_s
    (the strategy's communication span less its exposed part), else 0."""
    if step.get("hidden_comm_s") is not None:
        return step["hidden_comm_s"]
    if step.get("link_s") is not None:
        return max(0.0, step["link_s"] - step["comm_s"])
    return 0.0


def server_update_s(run: RunDir) -> float:
    """Mean time of one server update (opt_s / updates in the servers' result.json); 0 without servers."""
    figures = [json.loads(p.result.read_text()).get("strategy") or {} for p in run.peers() if p.result.exists()]
    times = [f["opt_s"] / f["updates"] for f in figures if f.get("role") == "server" and f.get("updates")]
    return statistics.fmean(times) if times else 0.0


def oversubscription(summary: Summary, launch: LaunchSpec) -> tuple[float | None, str]:
    """processes x threads / cores: summary.json shape.oversubscription, else from the launch spec and the core
    count the run recorded (shape.cores or machine.cores); None when the run records neither."""
    shape = summary.shape
    if shape.oversubscription is not None:
        return float(shape.oversubscription), "summary.json shape.oversubscription"
    cores = shape.cores or summary.machine.cores
    if cores:
        return launch.processes * launch.threads / cores, f"{launch.processes} processes x " \
               f"{launch.threads} threads / {cores} cores (launch.json, summary.json)"
    return None, "the run records no core count"


def own_cores_compute(measured: float, factor: float | None, source: str) -> tuple[float, str]:
    """Compute per step as on a peer's own cores. An oversubscribed run (factor > 1) time-shared its cores: a
    CPU-bound step took `factor` times its own-core time, so the estimate is measured / factor."""
    if factor is None:
        return measured, f"as measured; whether the run was oversubscribed is unknown ({source})"
    if factor <= 1:
        return measured, f"as measured (not oversubscribed: {factor:.2g}, {source})"
    return measured / factor, (f"CORRECTED: the run was oversubscribed {factor:.2g}x ({source}); measured "
                               f"{measured:.4g} s / {factor:.2g}, assuming CPU-bound steps share the cores evenly")


def measure(path: Path, payload_shares: dict[int, float], evidence: Evidence | None = None) -> Measured:
    """The cost-model parameters of one run (see METHODS); payload_shares: payload / nominal rate of a link by frame
    size (Evidence.payload_shares), the conversion every prediction from it uses; evidence: what else
    conf/evidence.json allows (time-to-target at larger batches)."""
    nodes = [RunDir(folder) for folder in summary_folders(path)]  # a run over several nodes: a folder per node
    summaries = [Summary.load(node.summary) for node in nodes]
    run, summary = nodes[0], summaries[0]
    config = summary.config
    expected = summary.shape.nnodes or 1
    if len(nodes) != expected:
        raise ValueError(f"{path}: a run over {expected} nodes, of which {len(nodes)} wrote a summary")
    model = cost_model(config["strategy"])
    peers = [p for node in nodes for p in node.peers()]
    steps_by_rank = {p.rank: s for p in peers if (s := read_jsonl(p.steps))}
    if not steps_by_rank:
        raise ValueError(f"{path}: no worker logged a step")
    workers = len(steps_by_rank)
    knobs = summary.strategy_knobs or {}
    warmup, period = model.warmup_steps(knobs), model.steps_per_round(knobs)
    first = warmup + 1
    every_round = list(round_records(steps_by_rank).values())
    rounds = [records for records in every_round if min(r["step"] for r in records) >= first]
    payload = statistics.fmean(max(max(r["bytes_sent"], r["bytes_recv"]) for r in records)
                               for records in rounds) if rounds else 0.0
    if not rounds and every_round:
        raise ValueError(f"{path}: no averaging round from step {first} on, where {config['strategy']['name']}'s "
                         "steady state starts (after its cost model's warmup_steps), so S cannot be derived")
    if not payload and model.communicates:
        raise ValueError(f"{path}: the run moved no payload (peers={workers}?), so S cannot be derived")
    dilation = float(summary.isolation.dilation or 1)  # logs are in real seconds (METHODS)
    link = run_link(run, config, dilation)
    rate = payload_rate(link, payload_shares) if link else 0.0
    size = model.averaged_bytes(Round(payload, workers, rate, knobs)) if payload else 0.0
    launch = LaunchSpec.load(run)
    timed = {rank: steady(steps, warmup, period) for rank, steps in steps_by_rank.items()}
    steady_steps = [s for steps in timed.values() for s in (steps[1:] or steps)]
    factor, source = max((oversubscription(s, launch) for s in summaries), key=lambda found: found[0] or 0)
    compute, note = own_cores_compute(statistics.fmean(s["data_s"] + s["compute_s"] + s["opt_s"]
                                                       for s in steady_steps) / dilation, factor, source)
    machine = summary.machine.fingerprint
    m = Measured(
        run=path, strategy=config["strategy"]["name"], model=model, workers=workers, batch=launch.batch_size,
        knobs=knobs, compute_s=compute, compute_note=note, oversubscription=factor,
        compute_of="measured by this run on "
                   + (describe_machine(machine) if machine else "its machine (not recorded)"),
        hidden_s=min(compute, statistics.fmean(hidden_comm_s(s) for s in steady_steps) / dilation),
        server_s=max(server_update_s(node) for node in nodes) / dilation,
        payload_bytes=payload, size_bytes=size, link=link,
        measured_step_s=statistics.fmean(mean_step_s(steps) for steps in timed.values()) / dilation,
        samples_to_target=summary.samples_to_target if len(nodes) == 1 else time_to_target(
            {p.rank: read_jsonl(p.evals) for p in peers if p.rank in steps_by_rank}, steps_by_rank, {},
            summary.target | {"bootstrap": 0})["samples_to_target"],
        payload_shares=payload_shares,
        batch_scaling=evidence.batch_scaling((config.get("model") or {}).get("name"),
                                             config.get("lr_scaling", "none")) if evidence else None,
    )
    if link:  # the share of overlappable transfers the run overlapped (CostModel.fit_overlap; 0: no link)
        m.overlap = model.fit_overlap(m.cost(workers, link), m.measured_step_s)
    return m


def declared(m: Measured, step_s: float | None = None, samples_per_s: float | None = None,
             gradient_mb: float | None = None, batch: int | None = None,
             samples_per_s_per_node: float | None = None, devices_per_node: int = 1) -> Measured:
    """The run's parameters with the user's own compute (seconds per step per device, or samples/s per device or per
    node of `devices_per_node` devices, at `batch` samples per device and step: default the run's batch per worker)
    and the model's gradient size S in MB, where declared. The hidden communication keeps its share of the compute
    (backward hides in proportion to its length): H' = H · declared / measured compute. The run's samples to target
    are its own model's at its own batch: with another model or batch, none."""
    batch = batch or m.batch
    per_node = ""
    if samples_per_s_per_node is not None:  # a node's D devices share its throughput
        samples_per_s = samples_per_s_per_node / devices_per_node
        per_node = f" ({samples_per_s_per_node:g} samples/s per node of {devices_per_node} devices)"
    if step_s is None and samples_per_s is not None:
        step_s = batch / samples_per_s
    if step_s is not None:
        what = (f"{samples_per_s:g} samples/s per device{per_node}" if samples_per_s
                else f"{step_s:g} s per step per device")
        hidden_share = m.hidden_s / m.compute_s if m.compute_s > 0 else 0.0
        m = replace(m, compute_s=step_s, hidden_s=hidden_share * step_s, declared=(*m.declared, "compute"),
                    compute_note=f"declared: {what} at batch {batch}",
                    compute_of=f"declared by you: {what} at batch {batch}")
    if gradient_mb is not None:
        m = replace(m, size_bytes=gradient_mb * 1e6, declared=(*m.declared, "gradient"))
    if gradient_mb is not None or batch != m.batch:
        m = replace(m, batch=batch, samples_to_target=None, batch_scaling=None)
    return m


def run_strategy(path: Path) -> str:
    """The strategy a run's config names."""
    return Summary.load(RunDir(summary_folders(path)[0]).summary).config["strategy"]["name"]


def calibration_problems(path: Path) -> list[str]:
    """Why a run cannot calibrate a projection: the link or CPU figures it failed (metrics/summary/fidelity.py)."""
    return [problem for folder in summary_folders(path)
            for problem in unfaithful(Summary.load(RunDir(folder).summary))]


# --- projection ------------------------------------------------------------------------

def project_link(m: Measured, link: Link, peers: list[int], validation: Validation | None) -> dict:
    """The predictions on one link: per N the step, its band (only inside the validated region), why it lies outside
    that region, throughput and time-to-target; none where the model failed its validation (each row says why)."""
    rows: list[dict] = []
    no_nodes = (f"{m.strategy}'s cost model states no model of nodes of several devices"
                if link.devices_per_node > 1 and not m.model.models_nodes else None)
    for n in peers:
        if withheld := (validation.failed if validation else None) or no_nodes:
            rows.append({"peers": n, "wire_over_compute": None, "unvalidated": True,
                         "unvalidated_why": [withheld], "step_s": None, "withheld": withheld,
                         "band_step_s": None, "throughput_samples_per_s": None, "time_to_target_s": None})
            continue
        wire_over_compute = m.wire_over_compute(n, link)
        beyond = unvalidated(validation, n, link, wire_over_compute, m.size_bytes)
        row = {"peers": n, "wire_over_compute": wire_over_compute, "unvalidated": bool(beyond),
               "unvalidated_why": beyond}
        step = m.step_s(n, link)
        throughput = n * m.batch / step
        samples, basis = samples_to_target_at(m, n)
        band = validation.band(step) if validation and not beyond else None
        rows.append(row | {"step_s": step, "withheld": None, "band_step_s": band,
                           "throughput_samples_per_s": throughput,
                           "time_to_target_s": samples / throughput if samples else None,
                           "time_to_target_basis": basis})
    return {"link": asdict(link), "rows": rows, **stops_scaling(rows)}


def samples_to_target_at(m: Measured, peers: int) -> tuple[float | None, str | None]:
    """Samples to the target at `peers` workers and why that number (METHODS time_to_target_s)."""
    scaling, batch = m.batch_scaling, peers * m.batch
    if m.samples_to_target and peers <= m.workers:
        return m.samples_to_target, "the measured run's samples (an upper bound at a smaller batch)"
    if m.samples_to_target and scaling and batch <= scaling["largest_batch"]:
        return (samples_at(m.samples_to_target, m.workers * m.batch, batch, scaling["noise_scale"]),
                f"noise scale {scaling['noise_scale']:.4g} samples, checked up to batch {scaling['largest_batch']} "
                f"(conf/evidence.json noise_scale, {scaling['measured_at']})")
    return None, None


def stops_scaling(rows: list[dict]) -> dict:
    """The first N whose throughput gain per doubling over the previous N is below STOP_GAIN (None: never, or no
    numbers)."""
    for before, after in zip(rows, rows[1:]):
        if before["throughput_samples_per_s"] is None or after["throughput_samples_per_s"] is None:
            return {"stops_scaling_at": None}
        doublings = math.log2(after["peers"] / before["peers"])
        gain = (after["throughput_samples_per_s"] / before["throughput_samples_per_s"]) ** (1 / doublings) - 1
        if gain < STOP_GAIN:
            return {"stops_scaling_at": after["peers"], "gain_per_doubling": gain, "from_peers": before["peers"]}
    return {"stops_scaling_at": None}


def validation_record(validation: Validation | None) -> dict | None:
    if validation is None:
        return None
    return {key: getattr(validation, key)
            for key in ("source", "cases", "errors", "largest_peers", "rates_mbit", "region_text", "latency_ms",
                        "failed")}


def project(m: Measured, links: list[Link], peers: list[int], evidence: Evidence) -> dict:
    validation = evidence.validation(m.strategy)
    check = None  # the run's own model only: a declared compute or gradient is a model the run did not measure
    if m.link is not None and not m.declared and not (validation and validation.failed):
        predicted = m.step_s(m.workers, m.link)
        check = {"peers": m.workers, "link": asdict(m.link), "predicted_step_s": predicted,
                 "measured_step_s": m.measured_step_s, "error": predicted / m.measured_step_s - 1}
    fields = asdict(m)  # the link as a dict, like every link in the output
    return {
        "run": str(m.run), "strategy": m.strategy,
        "model": first_paragraph(m.model.step_time),
        "measured": {"workers": m.workers, "batch_per_worker": m.batch} | {key: fields[key] for key in (
            "compute_s", "compute_note", "compute_of", "oversubscription", "hidden_s", "server_s", "overlap",
            "payload_bytes", "size_bytes", "knobs", "link", "measured_step_s", "samples_to_target", "declared")},
        "payload_share": {"by_mtu": m.payload_shares, "source": evidence.goodput_source},
        "model_check": check,
        "validation": validation_record(validation),
        "projections": [project_link(m, link, peers, validation) for link in links],
    }


# --- configurations: the runs of one strategy with the same knobs, workers and batch ---------------

@dataclass
class Configuration:
    """The runs of one strategy with the same knobs, workers and batch: a column of the table."""

    label: str
    runs: list[Measured]

    @property
    def strategy(self) -> str:
        return self.runs[0].strategy


def configurations(measured: list[Measured]) -> list[Configuration]:
    """The runs grouped by strategy, knobs, workers and batch; labelled by the strategy, and where a strategy has
    several, by what differs (its knobs, "from N=4", "batch 64")."""
    groups: dict[tuple, list[Measured]] = {}
    for m in measured:
        groups.setdefault((m.strategy, json.dumps(m.knobs, sort_keys=True, default=str), m.workers, m.batch),
                          []).append(m)
    found = []
    for key, runs in groups.items():
        siblings = [other for other in groups if other[0] == key[0]]
        found.append(Configuration(configuration_label(key, siblings), runs))
    return found


def configuration_label(key: tuple, siblings: list[tuple]) -> str:
    strategy, knobs, workers, batch = key
    if len(siblings) == 1:
        return strategy
    knob_sets = [json.loads(s[1]) for s in siblings]
    mine = json.loads(knobs)
    parts = [f"{name}={mine.get(name)}" for name in sorted({n for s in knob_sets for n in s})
             if len({json.dumps(s.get(name)) for s in knob_sets}) > 1]
    parts += [f"from N={workers}"] if len({s[2] for s in siblings}) > 1 else []
    parts += [f"batch {batch}"] if len({s[3] for s in siblings}) > 1 else []
    return f"{strategy} ({', '.join(parts)})"


def predict_configuration(runs: list[Measured], link: Link, peers: list[int], validation: Validation | None) -> dict:
    """A configuration's predictions on one link from its runs: per N the mean step over the runs (each run's in
    runs_step_s), UNVALIDATED where any run's prediction lies outside the validated region, else the band of the mean;
    throughput N x batch / mean step; the mean time-to-target of the runs that give one."""
    per_run = [project_link(m, link, peers, validation)["rows"] for m in runs]
    rows = []
    for n, cells in zip(peers, zip(*per_run)):
        if cells[0]["withheld"]:
            rows.append(cells[0])
            continue
        steps = [c["step_s"] for c in cells]
        step = statistics.fmean(steps)
        why = list(dict.fromkeys(reason for c in cells for reason in c["unvalidated_why"]))
        times = [c["time_to_target_s"] for c in cells if c["time_to_target_s"] is not None]
        rows.append({"peers": n, "step_s": step, "runs_step_s": steps, "withheld": None, "unvalidated": bool(why),
                     "unvalidated_why": why, "band_step_s": validation.band(step) if validation and not why else None,
                     "throughput_samples_per_s": n * runs[0].batch / step,
                     "time_to_target_s": statistics.fmean(times) if times else None})
    return {"link": asdict(link), "rows": rows, **stops_scaling(rows)}


def project_configuration(configuration: Configuration, links: list[Link], peers: list[int],
                          evidence: Evidence) -> dict:
    validation = evidence.validation(configuration.strategy)
    return {"label": configuration.label, "strategy": configuration.strategy,
            "runs": [str(m.run) for m in configuration.runs], "validation": validation_record(validation),
            "projections": [predict_configuration(configuration.runs, link, peers, validation) for link in links]}


# --- output --------------------------------------------------------------------------------

def with_unit(value: float | None, unit: str, digits: int = 3) -> str:
    return "n/a" if value is None else f"{number(value, digits)} {unit}"


def validation_text(validation: dict | None) -> str:
    """The validated region, first: where a prediction may carry a band."""
    if validation is None:
        return ("  validated region: none (this strategy's cost model has no held-out case in conf/evidence.json): "
                "no band anywhere; every prediction is UNVALIDATED")
    if validation["failed"]:
        return f"  NO PREDICTION: {validation['failed']} ({validation['source']})"
    errors = validation["errors"]
    return (f"  validated region: {validation['region_text']}, latency <= {validation['latency_ms']:g} ms "
            f"({counted(validation['cases'], 'held-out case')}, errors "
            f"{min(errors):+.0%} to {max(errors):+.0%}; {validation['source']}). Inside it: band = predicted / "
            "(1 + error); outside it: UNVALIDATED, no band")


def cell_text(row: dict) -> str:
    """A prediction in the table: its step in s, with its band inside the validated region, else UNVALIDATED."""
    if row["withheld"]:
        return "no number"
    if row["band_step_s"]:
        low, high = row["band_step_s"]
        return f"{number(row['step_s'])} [{number(low)}–{number(high)}]"
    return f"{number(row['step_s'])} UNVALIDATED"


def table_text(projected: list[dict], peers: list[int]) -> list[str]:
    """One table: a row per link and N, a column per configuration (its cells: cell_text)."""
    links = projected[0]["projections"]
    rows = [["link", "N", *(c["label"] for c in projected)]]
    for index, link in enumerate(links):
        label = Link(**link["link"]).label
        rows += [[label, str(n), *(cell_text(c["projections"][index]["rows"][at]) for c in projected)]
                 for at, n in enumerate(peers)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) if column == 0 else cell.rjust(width)
                      for column, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]


def mean_of(results: list[dict], key: str) -> float:
    """The mean of a figure every run measured."""
    return statistics.fmean(r["measured"][key] for r in results)


def configuration_text(configuration: dict, results: list[dict], compute_declared: bool) -> list[str]:
    """A configuration's region, compute, cost model, the figures its runs gave, their model check and where it
    stops scaling."""
    first = results[0]["measured"]
    if samples := [r["measured"]["samples_to_target"] for r in results if r["measured"]["samples_to_target"]]:
        samples_text = f"{number(statistics.fmean(samples))} samples (measured)"
    elif first["declared"]:
        samples_text = "n/a (the run's figure is its own model's at its own batch, not your declared one's)"
    else:
        samples_text = "n/a (target not reached)"
    runs = counted(len(results), "run")
    lines = [f"{configuration['label']}: {runs} of {counted(first['workers'], 'worker')}, batch "
             f"{first['batch_per_worker']} per worker ({', '.join(configuration['runs'])})",
             validation_text(configuration["validation"])]
    if not compute_declared:
        lines.append(f"  compute: {'; '.join(dict.fromkeys(r['measured']['compute_of'] for r in results))}")
    lines += [f"  cost model (step_time): {results[0]['model']}",
              f"  from the {'run' if len(results) == 1 else f'{runs} (mean)'}: compute "
              f"{with_unit(mean_of(results, 'compute_s'), 's/step')} "
              f"({'; '.join(dict.fromkeys(r['measured']['compute_note'] for r in results))}); hidden communication "
              f"{with_unit(mean_of(results, 'hidden_s'), 's/step')}; server update "
              f"{with_unit(mean_of(results, 'server_s'), 's')}; fitted overlap {mean_of(results, 'overlap'):.2f}; "
              f"P {with_unit(mean_of(results, 'payload_bytes') / 1e6, 'MB')} per worker and round (measured payload) "
              f"-> S {with_unit(mean_of(results, 'size_bytes') / 1e6, 'MB')} (the strategy's payload relation); "
              f"samples to target {samples_text}"]
    if checks := [r["model_check"] for r in results if r["model_check"]]:
        errors = [c["error"] for c in checks]
        fitted = " (the overlap was fitted on each run: it holds by construction)" if first["overlap"] else ""
        if len(checks) == 1:
            (check,) = checks
            lines.append(f"  model check on the run's own link ({number(check['link']['mbit'])} Mbit/s, "
                         f"{check['link']['latency_ms']:g} ms): predicted "
                         f"{with_unit(check['predicted_step_s'], 's/step')}, measured "
                         f"{with_unit(check['measured_step_s'], 's/step')} (steady steps, mean over workers), error "
                         f"{check['error']:+.1%}{fitted}")
        else:
            spread = f"{min(errors):+.1%}" + (f" to {max(errors):+.1%}" if max(errors) > min(errors) else "")
            lines.append(f"  model check on each run's own link: error {spread} over "
                         f"{counted(len(checks), 'run')} (predicted / measured steady step - 1){fitted}")
    if not (configuration["validation"] or {}).get("failed"):
        lines += [f"  on {Link(**p['link']).label}: " + (
            f"stops scaling at N={p['stops_scaling_at']}: {p['from_peers']} -> {p['stops_scaling_at']} peers adds "
            f"{p['gain_per_doubling']:.1%} throughput per doubling (< {STOP_GAIN:.0%})" if p["stops_scaling_at"] else
            f"scales over the whole range (every doubling adds >= {STOP_GAIN:.0%})")
            for p in configuration["projections"]]
    return lines


def text_report(projected: list[dict], results: list[dict], peers: list[int], left_out: list[str],
                refused: list[str]) -> list[str]:
    """The table across configurations, then what it rests on: whose compute, the link's payload rate, the runs
    left out and each configuration's region, figures and model check."""
    declared_compute = {r["measured"]["compute_of"] for r in results if "compute" in r["measured"]["declared"]}
    lines = ["PREDICTED step time (s) by each strategy's cost model, not measured. [low–high]: the band its held-out "
             "validation allows (inside the validated region only); UNVALIDATED: outside it, no band; no number: the "
             "model failed its validation or states no model of the cluster's shape",
             *table_text(projected, peers), ""]
    if declared_compute:
        lines.append(f"compute: {'; '.join(sorted(declared_compute))}")
    lines.append("link rate: payload rate = nominal x the payload share of the link's frame size "
                 f"({results[0]['payload_share']['source']})")
    lines += [f"left out: {why}" for why in left_out] + [f"refused: {why}" for why in refused]
    for configuration in projected:
        lines += ["", *configuration_text(configuration, [r for r in results if r["run"] in configuration["runs"]],
                                          bool(declared_compute))]
    return lines


def plot(projected: list[dict], peers: list[int], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    links = [p["link"] for p in projected[0]["projections"]]
    fig, axes = plt.subplots(1, len(links), figsize=(5 * len(links), 4.5), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, link in zip(axes[0], links):
        for configuration in projected:
            p = next(q for q in configuration["projections"] if q["link"] == link)
            if (configuration["validation"] or {}).get("failed"):  # a failed model: no number, not even drawn
                continue
            rows = p["rows"]
            throughput = [r["throughput_samples_per_s"] for r in rows]
            line, = ax.plot(peers, throughput, marker="o",
                            label=f"{configuration['label']} ({counted(len(configuration['runs']), 'run')})")
            unchecked = [r["peers"] for r in rows if r["unvalidated"]]
            ax.plot(unchecked, [r["throughput_samples_per_s"] for r in rows if r["unvalidated"]], "x",
                    color="black", markersize=9)
            if banded := [r for r in rows if r["band_step_s"]]:
                samples = [r["throughput_samples_per_s"] * r["step_s"] for r in banded]  # N x batch
                ax.fill_between([r["peers"] for r in banded],
                                [n / r["band_step_s"][1] for n, r in zip(samples, banded)],
                                [n / r["band_step_s"][0] for n, r in zip(samples, banded)],
                                color=line.get_color(), alpha=0.15, linewidth=0)
            if p["stops_scaling_at"]:
                stop = next(r for r in p["rows"] if r["peers"] == p["stops_scaling_at"])
                ax.plot(stop["peers"], stop["throughput_samples_per_s"], "s", markersize=11, fillstyle="none",
                        color=line.get_color())
        ax.set(yscale="log", xlabel="peers N")
        ax.set_title("\n".join(textwrap.wrap(Link(**link).label, 40)), fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(peers, [str(n) for n in peers], minor=False)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("predicted throughput (samples/s)")
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=8)
    failed = sorted({c["label"] for c in projected if (c["validation"] or {}).get("failed")})
    title = ["PREDICTED by each strategy's cost model from measured runs (not measured)",
             "shaded: the error band its held-out validation measured (inside the validated region only); x: "
             "unvalidated (beyond the validated N, rate or latency; no band); "
             f"square: stops scaling (< {STOP_GAIN:.0%} per doubling)"]
    title += [f"not drawn (failed their validation): {', '.join(failed)}"] if failed else []
    width = int(fig.get_figwidth() * 72 / (0.6 * TITLE_POINTS))  # characters of the title's font across the figure
    fig.suptitle("\n".join(wrapped for part in title for wrapped in textwrap.wrap(part, width)), fontsize=TITLE_POINTS)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def on_cluster(link: Link, peers: list[int], devices_per_node: int = 1, intra_node_link: str | None = None,
               ps_servers: int | None = None, ps_placement: str = "dedicated") -> Link:
    """`link` as each node's network link in a cluster of nodes of `devices_per_node` devices joined by
    `intra_node_link` (MBIT[,LATENCY_MS]), with ps's `ps_servers` (None: the run's own) placed `ps_placement`."""
    intra = Link("intra-node", 0.0, 0.0, "")
    if devices_per_node > 1:
        if intra_node_link is None:
            raise ValueError(f"devices-per-node {devices_per_node}: give the link between a node's devices "
                             "(intra-node-link MBIT[,LATENCY_MS])")
        intra = parse_link(intra_node_link, "intra-node-link")
    cluster = replace(link, devices_per_node=devices_per_node, intra_node_mbit=intra.mbit,
                      intra_node_latency_ms=intra.latency_ms, ps_servers=ps_servers, ps_placement=ps_placement)
    if problems := cluster_problems(cluster, peers):
        raise ValueError("; ".join(problems))
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metrics.projection", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run directories (or directories holding runs)")
    parser.add_argument("--peers", nargs="+", type=int, default=[16, 32, 64, 128, 256], help="peer counts (>= 2)")
    parser.add_argument("--link", nargs="+", dest="links", default=[],
                        help="wan|lan|home|datacenter|MBIT, each optionally ,LATENCY_MS and ,MTU (frame size in bytes, "
                             "default 1500) (default: the run's own link)")
    compute = parser.add_mutually_exclusive_group()
    compute.add_argument("--compute-s", type=float, help="your device's compute per step at --batch samples, in "
                                                         "seconds (default: the run's own, measured)")
    compute.add_argument("--samples-per-s", type=float, help="your device's training rate at --batch samples per "
                                                             "step, samples/s (instead of --compute-s)")
    compute.add_argument("--samples-per-s-per-node", type=float,
                         help="one node's training rate at --batch samples per device and step, samples/s, where a "
                              "source gives that (divided by --devices-per-node once)")
    parser.add_argument("--batch", type=int, help="samples per device and step at which your --compute-s or "
                                                  "--samples-per-s holds (default: the run's batch per worker)")
    parser.add_argument("--devices-per-node", type=int, default=1,
                        help="devices per node of your cluster: --link is each node's network link, shared by its "
                             "devices, --peers counts devices (default 1: one worker per link)")
    parser.add_argument("--intra-node-link", help="MBIT[,LATENCY_MS] between a node's devices, the rate all payload "
                                                  "(NVLink, PCIe); needed with --devices-per-node above 1")
    parser.add_argument("--ps-servers", type=int, help="ps's server count (default: the run's own)")
    parser.add_argument("--ps-placement", choices=PS_PLACEMENTS, default="dedicated",
                        help="ps's servers on links of their own (default) or co-located, one on each of as many "
                             "nodes, sharing the node's link")
    parser.add_argument("--gradient-mb", type=float, help="your model's gradient size S in MB (default: the run's)")
    parser.add_argument("-o", "--out", type=Path, help="output directory (default: the one directory given)")
    parser.add_argument("--evidence", type=Path, default=EVIDENCE,
                        help="the evidence file holding the payload share (link_goodput) and the projection "
                             "validation (default: conf/evidence.json, written by bench/run.py)")
    args = parser.parse_args(argv)
    runs = [r for d in args.dirs for r in run_folders(run_dirs_under(d))]  # a run over several nodes: once
    if not runs:
        parser.error(f"no run (a directory holding summary.json) under {', '.join(map(str, args.dirs))}")
    if args.out is None and len(args.dirs) > 1:
        parser.error("several directories: name the output directory with -o")
    if min(args.peers) < 2:
        parser.error("--peers: a projection is of 2 or more peers")
    peers = sorted(set(args.peers))
    for name in ("compute_s", "samples_per_s", "samples_per_s_per_node", "gradient_mb", "batch", "devices_per_node",
                 "ps_servers"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.batch is not None and (args.compute_s, args.samples_per_s, args.samples_per_s_per_node) == (None,) * 3:
        parser.error("--batch states the batch of your --compute-s or --samples-per-s(-per-node): give one of them")
    shape = {"devices_per_node": args.devices_per_node, "intra_node_link": args.intra_node_link,
             "ps_servers": args.ps_servers, "ps_placement": args.ps_placement}
    try:
        links = [on_cluster(parse_link(text), peers, **shape) for text in args.links]
        evidence = load_evidence(args.evidence)
        measured, left_out = [], []
        for run in runs:  # a run that did not hold its setting, or cannot be measured, is left out and named
            try:
                if problems := calibration_problems(run):
                    raise ValueError("; ".join(problems))
                measured.append(declared(measure(run, evidence.payload_shares, evidence), args.compute_s,
                                         args.samples_per_s, args.gradient_mb, args.batch,
                                         args.samples_per_s_per_node, args.devices_per_node))
            except ValueError as exc:
                left_out.append(f"{run}: {exc}")
        if not measured:
            raise ValueError("no run can calibrate a projection (one that did not hold its setting cannot calibrate "
                             "a projection): " + "; ".join(left_out))
        if not links and (unshaped := [m.run for m in measured if m.link is None]):
            raise ValueError(f"{unshaped[0]} ran on unshaped links (no rate to start from): give --link")
        own = {json.dumps(asdict(m.link)): m.link for m in measured if m.link is not None}
        links = links or [on_cluster(link, peers, **shape) for link in own.values()]  # the runs' own links
        results = [project(m, links, peers, evidence) for m in measured]
        found = configurations(measured)
        projected = [project_configuration(c, links, peers, evidence) for c in found]
    except ValueError as exc:
        print(f"avgbench: error: {exc}", file=sys.stderr)
        return 2
    projected_strategies = {c.strategy for c in found}
    refused = [f"{strategy}: none of its {counted(count, 'run')} held its setting or could be measured"
               for strategy, count in Counter(run_strategy(run) for run in runs).items()
               if strategy not in projected_strategies]
    print("\n".join(text_report(projected, results, peers, left_out, refused)), end="\n\n")
    out = args.out or args.dirs[0]
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps({
        "note": "every step_s, throughput and time-to-target here is PREDICTED by the strategy's cost model, "
                "not measured; measured figures are under 'measured' and model_check.measured_step_s; each run's "
                "'validation' is the held-out validation its error bands come from; a strategy whose model "
                "failed it has no number, only 'withheld'",
        "peers": peers, "methods": METHODS, "configurations": projected, "runs": results, "left_out": left_out,
        "refused": refused}, indent=1, default=str))
    plot(projected, peers, out / "projection.png")
    print(f"wrote {out / 'projection.json'} and {out / 'projection.png'} (predictions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

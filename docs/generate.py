#!/usr/bin/env python
"""Rewrite the generated blocks of README.md and docs/*.md from conf/ and bench/results/.

    python docs/generate.py            # rewrite every block (make docs)
    python docs/generate.py --check    # exit 1 naming each stale block, change nothing

A block is the text between the lines `<!-- generated:SPEC -->` and `<!-- end generated:SPEC -->`. SPEC is a generator's name
and its arguments, e.g. `knobs conf/strategy/ring.yaml` or `bench thesis strategies`. Knob tables come from the
yaml files (defaults, comments) and launchers/schema.py (what a knob accepts); measured tables from
bench/results/ (bench/results.py), each stamped with when and on which machine it was measured (bench/run.py's fingerprint). Figures measured by hand belong in docs/lab-log.md, nowhere else.
"""
import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.headline import WALL_TIME_GOAL  # noqa: E402
from bench.noise_scale import log_sd  # noqa: E402
from bench.results import load_all, source  # noqa: E402
from launchers.config import registered_strategy  # noqa: E402
from launchers.schema import RULES, accepted  # noqa: E402
from metrics.recording.evidence import EVIDENCE  # noqa: E402
from metrics.recording.machine import describe_machine  # noqa: E402
from metrics.report.noise import planning_noise, upper_log_sd  # noqa: E402
from metrics.report.primary import Primary  # noqa: E402
from metrics.report.stats import detectable, power  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^<!-- generated:(?P<spec>[^>]*?) -->\n(?P<body>.*?)^<!-- end generated:(?P<end>[^>]*?) -->$",
                   re.S | re.M)  # markers stand on lines of their own
OPEN = re.compile(r"^<!-- (end )?generated:", re.M)


# --- knob tables from conf/ -------------------------------------------------------------
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?: +(?P<value>[^#]*?))? *(?:# ?(?P<comment>.*))?$")


def knobs_of(path: Path) -> list[tuple[str, str, str]]:
    """(dotted key as users write it, value as written, its comment) for every leaf of a conf yaml file (a group's
    option file puts its keys under the group's name); `defaults`, `hydra` and the strategy's registration
    (strategy.name, strategy.target) are wiring, not knobs."""
    text = path.read_text()
    group = path.parent.name if path.parent != ROOT / "conf" and "@package _global_" not in text else None
    rows, parents, skip_below = [], [], None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        match = KEY.match(line)
        indent = len(line) - len(line.lstrip())
        if skip_below is not None and indent > skip_below:
            continue  # inside a block scalar or a skipped mapping
        skip_below = None
        if not match:
            continue
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([p[1] for p in parents] + [match["key"]])
        value = (match["value"] or "").strip()
        if key.split(".")[0] in ("defaults", "hydra") or key in ("strategy.name", "strategy.target"):
            skip_below = indent
            continue
        if value in ("", "|", ">"):
            parents.append((indent, match["key"]))
            if value:
                skip_below = indent
            continue
        rows.append((f"{group}.{key}" if group else key, value, (match["comment"] or "").strip()))
    return rows


def header_of(path: Path) -> str:
    """A conf file's opening comment without its examples (indented lines), up to its list of knobs."""
    lines = []
    for line in path.read_text().splitlines():
        text = line.removeprefix("# ").rstrip()
        if not line.startswith("#") or text.startswith("Knobs"):
            break
        if "@package" not in text and not text.startswith("  "):
            lines.append(text)
    return " ".join(lines)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def knobs(path: str, *selection: str) -> str:
    """The knobs of one conf file; `selection`: dotted prefixes to show (all when none), `!prefix` to leave out."""
    shown = [p for p in selection if not p.startswith("!")]
    hidden = [p[1:] for p in selection if p.startswith("!")]

    def under(key: str, prefix: str) -> bool:
        return key == prefix or key.startswith(prefix + ".")

    rows = [(k, v, c) for k, v, c in knobs_of(ROOT / path)
            if (not shown or any(under(k, p) for p in shown)) and not any(under(k, p) for p in hidden)]
    if not rows:
        raise ValueError(f"knobs {path} {' '.join(selection)}: no knob matches")
    rules = dict(RULES)
    if Path(path).parent.name == "strategy":
        name = Path(path).stem
        rules |= {f"{name}.{knob}": rule for knob, rule in registered_strategy(name).rules.items()}
    lines = [f"From `{path}`:", "", "| knob | default | accepts | meaning |", "|---|---|---|---|"]
    for key, value, comment in rows:
        accepts = accepted(yaml.safe_load(value), rules.get(key))
        lines.append(f"| `{key}` | `{cell(value)}` | {cell(accepts)} | {cell(comment)} |")
    return "\n".join(lines)


def groups() -> str:
    """Every config group of conf/ with its options and each option's opening comment."""
    lines = ["| group | option | what it is |", "|---|---|---|"]
    for group in sorted(p for p in (ROOT / "conf").iterdir() if p.is_dir() and p.name != "hydra"):
        for option in sorted(group.glob("*.yaml")):
            lines.append(f"| `{group.name}` | `{option.stem}` | {cell(header_of(option))} |")
    return "\n".join(lines)


# --- measured tables from bench/results/ -------------------------------------------------
def stamp(entry: dict, part: str = "") -> str:
    """Where a table's figures come from: the entry (or one part of it), when and on which machine."""
    return f"*Measured {entry['measured_at']} on {describe_machine(entry['machine'])} ({source(entry['name'], part)}).*"


def stamp_rows(entry: dict, rows: list[dict]) -> str:
    """A table whose rows were measured at several times, possibly on several machines."""
    dates = sorted(r["measured_at"] for r in rows)
    machines = sorted({describe_machine(r["machine"]) for r in rows})
    return (f"*Measured {dates[0]} to {dates[-1]} on {'; '.join(machines)} "
            f"({source(entry['name'])}, {len(rows)} rows).*")


def num(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def pct(x, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f} %"


def times(x, interval=None) -> str:
    """A ratio with its 95 % interval: 0.97× [0.88, 1.06]."""
    if x is None:
        return "–"
    return f"{x:.2f}×" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def caveat(entry: dict, part: str = "") -> list[str]:
    """An entry's caveat, or its part's (a known defect of how it was measured), shown above the tables made from
    it."""
    found = entry.get("caveat") or (entry.get("caveats") or {}).get(part)
    return [f"**Caveat:** {found}", ""] if found else []


def bench_summary() -> str:
    """Every benchmark's latest ratio beside its goal, date and machine; a caveat marked with its entry."""
    rows = [[f"`{e['name']}`" + (" (caveat)" if e.get("caveat") or e.get("caveats") else ""), num(e.get("ratio"), 3), cell(e["goal"]),
             e["measured_at"], describe_machine(e["machine"])] for e in load_all().values()]
    notes = [f"- `{e['name']}`: {e['caveat']}" for e in load_all().values() if e.get("caveat")]
    notes += [f"- `{e['name']}` → `{part}`: {text}" for e in load_all().values()
              for part, text in (e.get("caveats") or {}).items()]
    return "\n".join(table(["benchmark", "ratio", "goal", "measured", "machine"], rows)
                     + (["", "Caveats:", *notes] if notes else []))


def bench_machines() -> str:
    """The machines bench/results names, with the entries (and rows) measured on each."""
    found: dict[str, list[str]] = {}

    def visit(value, name: str) -> None:
        if isinstance(value, dict):
            if "machine" in value and isinstance(value["machine"], dict):
                found.setdefault(describe_machine(value["machine"]), []).append(name)
            for item in value.values():
                visit(item, name)
        elif isinstance(value, list):
            for item in value:
                visit(item, name)

    for name, entry in load_all().items():
        visit(entry, name)
    rows = [[machine, ", ".join(f"`{n}`" + (f" ({names.count(n)})" if names.count(n) > 1 else "")
                                for n in dict.fromkeys(names))] for machine, names in sorted(found.items())]
    return "\n".join(table(["machine", "entries (how many of their rows and parts)"], rows))


def bench_collectives(entry: dict) -> list[str]:
    rows = entry["rows"]
    peers = sorted({r["peers"] for r in rows})
    lines = [stamp(entry), "", f"Link efficiency (floor / measured link time) at {entry['setup']}:", ""]
    body = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = {r["peers"]: r for r in rows if r["strategy"] == strategy}
        wire = [mine[n]["wire_over_payload"] for n in peers if n in mine and mine[n].get("wire_over_payload")]
        body.append([f"`{strategy}`", *(num(mine[n]["efficiency"]) if n in mine else "–" for n in peers),
                     f"{min(wire):.2f}–{max(wire):.2f}" if wire else "–"])
    return lines + table(["strategy", *(f"N={n}" for n in peers), "wire bytes / payload"], body)


def bench_stepwise_vs_ring(entry: dict) -> list[str]:
    body = [[str(r["peers"]), f"{r['stepwise']['bytes']:,.0f}", f"{r['ring']['bytes']:,.0f}", num(r["bytes_ratio"]),
             num(r["stepwise"]["round_s"], 3), num(r["ring"]["round_s"], 3), num(r["round_time_ratio"])]
            for r in entry["rows"]]
    return [stamp(entry), "", f"Setup: {entry['setup']}.", ""] + table(
        ["N", "stepwise bytes per worker and round", "ring bytes", "bytes ratio", "stepwise round (s)",
         "ring round (s)", "round time ratio"], body)


def bench_ddp_overlap(entry: dict) -> list[str]:
    body = []
    for arm, runs in entry["rows"].items():
        mean = {k: sum(r["breakdown_s"][k] for r in runs) / len(runs) for k in runs[0]["breakdown_s"]}
        body.append([f"`{arm}`", num(entry["median_samples_per_s"][arm], 1), num(mean["compute_s"], 3),
                     num(mean["comm_s"], 3)])
    return [stamp(entry), "", f"Setup: {entry['setup']}; ratio {num(entry['ratio'], 3)} (goal {entry['goal']}).",
            ""] + table(["arm", "median samples/s", "mean compute s/step", "mean exposed comm s/step"], body)


def bench_overhead(entry: dict) -> list[str]:
    return [stamp(entry), "", f"Setup: {entry['setup']}. Median step (s) per alternated repeat: raw loop "
            f"{', '.join(num(x, 3) for x in entry['raw_step_s'])}; `strategy=single` "
            f"{', '.join(num(x, 3) for x in entry['framework_step_s'])}; ratio {num(entry['ratio'], 3)} "
            f"(goal {entry['goal']})."]


def bench_sampler(entry: dict) -> list[str]:
    return [stamp(entry), "", f"Setup: {entry['setup']}. The sampler thread used {num(entry['cpu_s'])} s of CPU in "
            f"{num(entry['wall_s'], 1)} s: {pct(entry['ratio'], 2)} of one core (goal {entry['goal']})."]


def bench_noise(entry: dict) -> list[str]:
    def attribution(shares: dict) -> str:
        return " / ".join(f"{shares[k]:+.2f}" for k in ("cpu_s", "runq_s", "other_s"))

    body = []
    for arm, figures in entry["arms"].items():
        spread = figures["spread"]
        body.append([f"`{arm}`", str(len(figures["runs"])),
                     f"{num(spread['wall_s']['min'], 3)} .. {num(spread['wall_s']['max'], 3)}",
                     pct(spread["wall_s"]["spread"]),
                     f"{num(spread['cpu_s']['min'], 3)} .. {num(spread['cpu_s']['max'], 3)}",
                     f"{num(spread['runq_s']['min'], 3)} .. {num(spread['runq_s']['max'], 3)}",
                     attribution(figures["between_runs_shares"]), attribution(figures["within_runs_shares"])])
    correlations = ", ".join(f"{k} {v:+.2f}" for k, v in entry["machine_correlation"].items())
    return [stamp(entry), "", f"Setup: {entry['setup']}.", ""] + table(
        ["arm", "runs", "wall s/step (min .. max)", "spread", "CPU s/step", "run-queue s/step",
         "run-to-run variance: CPU / run queue / other", "step-to-step: CPU / run queue / other"], body) + [
        "", f"Correlation of a run's wall time per step with the machine around it: {correlations}. "
            f"Reading the clocks costs {num(entry['clock_cost_us'], 0)} µs per step (median)."]


def bench_emulation(entry: dict, part: str) -> list[str]:
    if part == "headline":
        body = [[f"`{label}`", str(row["blocks"]), ", ".join(num(v) for v in row["per_block"]),
                 times(row["estimate"], row["interval_95"]), pct(row["spread"]), pct(row["throughput_spread"])]
                for label, row in entry["headline"]["strategies"].items()]
        return [stamp(entry, "headline"), ""] + table(
            ["configuration", "blocks", "paired speedup per block", "geometric mean, 95 % interval",
             "spread of paired speedups", "spread of throughput"], body)
    if part == "linearity":
        ratios = entry["linearity"]["ratios"]
        body = [[arm, ", ".join(num(v, 3) for v in r["per_block"]), times(r["estimate"], r["interval_95"])]
                for arm, r in ratios.items()]
        return [stamp(entry, "linearity"), "", "Throughput dilated back / the same process on a dedicated core "
                "without a quota, per block:", ""] + table(["arm", "per block", "geometric mean, 95 % interval"], body)
    if part == "invariance":
        factors = sorted({k for row in entry["invariance"].values() for k in row["ratios"]}, key=float)
        body = [[f"`{name}`", *(f"{num(row['ratios'][k]['estimate'], 3)} ("
                                + ", ".join(num(v, 3) for v in row["ratios"][k]["per_block"]) + ")"
                                for k in factors), str(row["checked_dilation"]),
                 str(entry["checked_dilation"][name])] for name, row in entry["invariance"].items()]
        return [stamp(entry, "invariance"), "", "Throughput at dilation k, dilated back / at k = 1, mean (per block):",
                ""] + table(["strategy", *(f"k = {k}" for k in factors), "invariance holds up to",
                             "offered (with linearity)"], body)
    raise ValueError(f"bench emulation: unknown part {part!r}")


def bench_projection(entry: dict, model: str) -> list[str]:
    measured = [r for r in entry["rows"] if r.get("model") == model and "error" in r]
    rows = [r for r in measured if r.get("counted") or r.get("faithful") is False]  # checked for fidelity
    if not rows:
        return [stamp_rows(entry, measured), "", f"No case of model `{model}` counts: its {len(measured)} rows were "
                "measured before runs were checked for fidelity (link and CPU)."]
    peers = sorted({r["peers"] for r in rows})

    def cell(row: dict | None) -> str:
        if row is None:
            return "not run"
        return f"{row['error']:+.3f}" if row.get("counted") else f"({row['error']:+.3f})"

    body = []
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        for rate in sorted({r["link_mbit"] for r in rows if r["strategy"] == strategy}):
            mine = {r["peers"]: r for r in rows if r["strategy"] == strategy and r["link_mbit"] == rate}
            body.append([f"`{strategy}`", f"{rate:g}", *(cell(mine.get(n)) for n in peers)])
    calibrations = sorted({r["calibration_link_mbit"] for r in rows if "calibration_link_mbit" in r})
    calibrated = (f"N = 2 at {', '.join(f'{c:g}' for c in calibrations)} Mbit/s calibrates every rate"
                  if calibrations else "N = 2 calibrates its own rate")
    held_out = entry["by_model"][model]["held_out"]
    return [stamp_rows(entry, rows), "", f"Error = predicted / measured step time − 1, model `{model}`; "
            f"{calibrated}, the other cases are held out. In parentheses: cases whose runs did not pass the link or "
            "CPU check (not counted).", ""] + table(
        ["strategy", "link (Mbit/s)", *(f"N={n}" for n in peers)], body) + [
        "", f"Held out and counted: {held_out['cases']} cases, median |error| {num(held_out['median_abs_error'], 3)}, "
            f"worst {held_out['worst_error']:+.3f}, {pct(held_out['within_15_percent'], 0)} within 15 %."]


def bench_projection_goals(entry: dict) -> list[str]:
    held = entry["held_out"]
    body = [[f"`{s}`", str(f["cases"]), num(f["median_abs_error"], 3), f"{f['worst_error']:+.3f}",
             pct(f["within_15_percent"], 0)] for s, f in held["by_strategy"].items()]
    goals = [f"{goal}: {'met' if met else '**missed**'}" for goal, met in entry["goals_met"].items()]
    cases = entry.get("coverage") or {}
    checked = (f"Held-out cases checked for fidelity: {cases['attempted']} attempted, {cases['faithful']} faithful, "
               f"{cases['within_goal']} within their goal." if cases.get("attempted") else
               "No held-out case of these rows was checked for fidelity (link and CPU) when it ran.")
    return [stamp_rows(entry, entry["rows"]), ""] + table(
        ["strategy", "held-out cases", "median abs error", "worst error", "within 15 %"], body) + [
        "", "Goals over every kept row: " + "; ".join(goals) + ".", "", checked]


def bench_link_goodput(entry: dict) -> list[str]:
    body = [[f"{rate} Mbit/s", num(s["mean"], 3), f"{num(s['min'], 3)} – {num(s['max'], 3)}", str(s["streams"])]
            for rate, s in entry["by_rate"].items()]
    spread = entry["spread"]
    return [stamp(entry), "", f"Setup: {entry['setup']}.", ""] + table(
        ["nominal rate", "payload share (mean)", "min – max", "streams"], body) + [
        "", f"Payload share used by every projection: **{num(entry['payload_share'], 3)}** (min "
            f"{num(spread['min'], 3)}, max {num(spread['max'], 3)}, {spread['streams']} streams; protocol overhead "
            f"{pct(entry['protocol_overhead'])} of the payload); repeats not counted (the link did not hold its rate): "
            f"{entry['not_counted']}."]


def bench_link_cpu(entry: dict) -> list[str]:
    body = [[f"{mtu} bytes", pct(s["busy_share"], 0), f"{pct(s['busy_share_range'][0], 0)} – "
             f"{pct(s['busy_share_range'][1], 0)}", num(s["payload_share"], 3)] for mtu, s in entry["by_mtu"].items()]
    repeats = max(r["repeat"] for r in entry["rows"]) + 1
    held = sum(r["link_faithful"] for r in entry["rows"])
    return [stamp(entry), "", f"Setup: {entry['setup']}.", ""] + table(
        ["frames", "cores busy (mean)", "min – max", "payload share"], body) + [
        "", f"Cores busy with the first frame size / with the last: **{num(entry['ratio'])}×** ({repeats} repeats "
            f"each; the links held their rate in {held} of {len(entry['rows'])} probes)."]


def bench_primary_noise(entry: dict) -> list[str]:
    rows = entry["rows"]
    body = [[r["configuration"], f"{r['data']}, {r['model']}", f"{r['figure']} ({r['metric']} {r['value']}, "
             f"{r['estimator']})",
             num(r["log_sd"], 3) if r["log_sd"] is not None else f"none: reached in {r['reached']} of the "
                                                                   f"{r['compared']} blocks compared",
             num(r.get("samples_log_sd"), 3),
             f"{r['blocks']} ({r['seeds']} seeds)" if "seeds" in r else str(r["blocks"]),
             str(r.get("blocks_for_10pct") or "–"), ", ".join(r.get("sweeps", []))] for r in rows]
    return [stamp_rows(entry, rows), ""] + table(
        ["configuration", "data, model", "primary figure", "sd of log ratios", "of which samples-to-target: sd",
         "blocks (distinct seeds: the sd's observations)", "blocks for ×/÷1.10 after Holm", "sweep"], body)


def bench_projection_verdicts(entry: dict) -> list[str]:
    body = [[f"`{s}`", f"±{v['goal']:.0%}", f"{v['worst']['error']:+.3f} (N={v['worst']['peers']}, "
             f"{v['worst']['link_mbit']:g} Mbit/s, {v['worst']['model']}"
             + ("" if v.get("checked", True) else "; not checked for fidelity") + ")",
             "met: a band inside its validated region" if v["met"] else "**missed: no number anywhere**"]
            for s, v in entry["verdicts"].items()]
    return [stamp_rows(entry, entry["rows"]), ""] + table(
        ["strategy", "goal", "worst held-out error", "verdict"], body)


def bench_thesis(entry: dict, family: str) -> list[str]:
    found = entry["families"][family]
    body = []
    for r in found["rows"]:
        shares = r.get("time_breakdown_share") or {}
        body.append([r["configuration"], f"{r['completed']} of {r['runs']}",
                     times(r["speedup"], None if r["baseline"] else r["speedup_interval_95"]),
                     "baseline" if r["baseline"] else r["speedup_claim"], times(r["time_to_target_ratio"]),
                     num(r["samples_to_target"], 0), num(None if r["time_per_sample_s"] is None
                                                         else 1000 * r["time_per_sample_s"]),
                     pct(shares.get("comm_s")), pct(shares.get("opt_s"))])
    return [f"*Measured {found['measured_at']} on {describe_machine(found['machine'])} ({source('thesis', f'families.{family}')}: "
            f"`{' '.join(found['overrides'])}`).*", ""] + table(
        ["configuration", "runs completed", "throughput vs its baseline, 95 % interval", "claim",
         "time-to-target ratio", "samples to target", "ms per sample", "exposed comm", "optimizer"], body)


def bench_thesis_projected(entry: dict) -> list[str]:
    remainder = entry["projected_remainder"]
    link = remainder["link"]
    body = [[r["family"], f"`{r['configuration']}`", f"{r['peers']} x {r['peer_cpus']}", num(r["step_s"], 3),
             f"[{num(r['band_step_s'][0], 3)}, {num(r['band_step_s'][1], 3)}]" if r.get("band_step_s") else "–",
             num(r["throughput_samples_per_s"], 0), "; ".join(r.get("unvalidated_why") or []) or
             ("yes" if r.get("unvalidated") else "no")]
            for r in remainder["rows"] if r.get("step_s") is not None]
    withheld: dict[str, int] = {}
    for r in remainder["rows"]:
        if r.get("step_s") is None and r.get("link") and "vCPUs" not in (r["not_projected"] or ""):
            withheld[r["not_projected"]] = withheld.get(r["not_projected"], 0) + 1
    return [stamp(entry, "projected_remainder"), "", f"PREDICTED, not measured: {remainder['projected']} "
            f"configurations projected on `{link['name']}` ({num(link['mbit'], 0)} Mbit/s), "
            f"{remainder['not_projected']} not projected (each row in the file says why).", ""] + (table(
        ["family", "configuration", "peers x vCPUs", "predicted step (s)", "error band (s)", "samples/s",
         "unvalidated"], body) + [""] if body else []) + [
        f"- No number for {count} configuration{'s' if count > 1 else ''}: {why}." for why, count in withheld.items()]


def bench_evaluation_share(entry: dict, part: str = "table") -> list[str]:
    repeats = entry["repeats"]
    if part == "line":
        return [f"*`make run` took {' and '.join(num(r['command_s'] / 60, 1) for r in repeats)} min in "
                f"{len(repeats)} runs, {' and '.join(pct(r['share']) for r in repeats)} of it evaluating after "
                f"training (goal {entry['goal']}: {'met' if entry['goal_met'] else 'missed'}), measured "
                f"{entry['measured_at']} on {describe_machine(entry['machine'])} ({source('evaluation_share')}, "
                f"[docs/usage.md](docs/usage.md#evaluation-after-training)).*"]
    if part != "table":
        raise ValueError(f"bench evaluation_share: unknown part {part!r}")
    body = [[str(i + 1), num(r["command_s"], 1), num(r["train_s"], 1), num(r["after_training_s"], 1),
             str(r["evaluations"]), num(r["precise_bn_s"], 1), num(r["load_and_test_pass_s"], 1), pct(r["share"]),
             "yes" if r["alone"] else f"no (others {pct(r['other_cpu_share'], 0)} of the CPU)"]
            for i, r in enumerate(repeats)]
    return [stamp(entry), "", f"Setup: {entry['setup']}.", ""] + table(
        ["run", "whole command (s)", "training (s)", "evaluation after training (s)", "evaluations",
         "of which precise BatchNorm (s)", "loading and test pass (s)", "evaluation's share", "alone"], body) + [
        "", f"Evaluation's share of the command: mean {pct(entry['ratio'])} over {len(repeats)} runs, goal "
            f"{entry['goal']}: {'met' if entry['goal_met'] else '**missed**'}."]


def verdict() -> str:
    """The sample verdict: the README's headline as typed, its latest recorded sweep (bench/headline.py), and
    whether it replicates the sweep before it."""
    entry = load_all()["headline"]
    last = len(entry["answers"]) - 1
    sweep = entry["answers"][last]
    return "\n".join([stamp({"name": "headline"} | sweep, f"answers.{last}"), "", *answer_lines(sweep), "",
                      wall_time_line(entry), "", replication_line(entry)])


def quick_verdict() -> str:
    """The quick comparison's verdict as typed, its one recorded sweep (bench/quick.py)."""
    entry = load_all()["quick"]
    return "\n".join([stamp(entry, "answer"), "", *answer_lines(entry["answer"])])


def answer_lines(sweep: dict) -> list[str]:
    """One recorded sweep's verdict (bench/headline.py figures_of): its primary figure, the declared comparisons,
    the answer, the links and its wall time."""
    claim = "withheld ({})" if sweep["claims_withheld"] else "**{}**"  # the verdict refused its claims: Answer
    body = [[f"{c['this']} vs {c['other']}", times(c["ratio"], c["interval_95"]), claim.format(c["claim"]),
             num(c["adjusted_p"], 3), f"{c['blocks']} ({c['censored']} censored)"] for c in sweep["comparisons"]]
    return [f"{sweep['primary']}", ""] + table(
        ["comparison", "ratio, 95 % interval", "claim", "Holm-adjusted p", "blocks"], body) + [
        "", f"Answer: {sweep['answer'].removeprefix('Answer: ')}", "", *[f"- {line}" for line in sweep["links"]], "",
        f"{sweep['runs']} runs, {sweep['wall_s'] / 60:.0f} min ({sweep['wall_method']})."]


def wall_time_line(entry: dict) -> str:
    """The longest recorded sweep against the same headline on loopback, as bench/headline.py measured it."""
    loopback = entry.get("loopback")
    if not loopback:
        return "Wall time against the headline on loopback: not measured on this machine."
    longest = max(a["wall_s"] for a in entry["answers"])
    return (f"Wall time: the longest recorded sweep, {longest / 60:.0f} min, is {entry['ratio']:.2f}× the same "
            f"headline on loopback (`network=loopback`: {loopback['wall_s'] / 60:.0f} min, {loopback['method']}, "
            f"{loopback['measured_at']}; goal at most {WALL_TIME_GOAL}×).")


def replication_line(entry: dict) -> str:
    """Whether the latest sweep gives the answer of the one before it (bench/headline.py's rule)."""
    found = entry.get("replication")
    if found is None:
        return "Replication: not yet checked (one sweep recorded on this machine)."
    earlier = entry["answers"][0]
    reasons = ([] if found["same_ranking"] else ["another ranking"]) + [
        f"contradicting claims: {'; '.join(found['contradictions'])}"] * bool(found["contradictions"]) + [
        "a verdict that withheld its claims"] * found["claims_withheld"] + [
        f"{len(found['separated_averaging_pairs'])} pairs of averaging configurations separated in both (at least 2 "
        "needed)"] * (len(found["separated_averaging_pairs"]) < 2)
    pairs = "; ".join(found["separated_averaging_pairs"]) or "none"
    said = "**replicates**" if found["replicates"] else f"**does not replicate** ({', '.join(reasons)})"
    return (f"Replication against the sweep measured {earlier['measured_at']} on the same machine: {said}; "
            f"separated in both: {pairs}.")


def bench_noise_scale(entry: dict) -> list[str]:
    base_sd = log_sd([r["samples_to_target"] for r in entry["base_runs"]]) if entry["base_samples_to_target"] else None
    rows = [[str(entry["base_batch"]), "–", num(entry["base_samples_to_target"], 0), num(base_sd, 3),
             "B0: the prediction's base"]]
    rows += [[str(r["batch"]), num(r.get("predicted_samples_to_target"), 0), num(r["measured_samples_to_target"], 0),
              num(r["measured_log_sd"], 3), f"{r['error']:+.3f}" if "error" in r else "–"] for r in entry["rows"]]
    outcome = "**passed**" if entry["passed"] else "**not passed**" + (f" ({entry['why']})" if "why" in entry else "")
    return [stamp(entry), "", f"Setup: {entry['setup']}. Gradient noise scale B_simple {num(entry['noise_scale'], 0)} "
            "samples (geometric mean over the repeats' allreduce runs: "
            f"{', '.join(num(v, 0) for v in entry['noise_scale_by_repeat'])}).", ""] + table(
        ["global batch", "predicted samples-to-target", "measured (geometric mean)", "sd of log, over repeats",
         "error"], rows) + ["", f"Goal, fixed before the data: {entry['goal']}, every run reaching the target: "
                               f"{outcome}."]


def bench_verdict_simulation(entry: dict) -> list[str]:
    fit = entry["fit"]
    body = [[c["scenario"], str(c["blocks"]), c["noise"],
             f"{pct(c['false_claim_rate'])} (≤ {pct(c['false_claim_upper'])})",
             f"{pct(c['false_decision_rate'])} (≤ {pct(c['false_decision_upper'])})", pct(c["withheld_share"], 0),
             f"{c['contradictions']} of {c['claims']}",
             pct(c["coverage"]) + (f" ({pct(c['no_interval_share'], 0)} none)" if c["no_interval_share"] else ""),
             ", ".join(f"{k}: {pct(v, 0)}" for k, v in c["power"].items()) or "–",
             f"{num(c['blocks_used'], 1)} ({num(c['censored_blocks'], 2)})"] for c in entry["cells"]]
    return [stamp(entry), "", f"Setup: {entry['setup']}. Fitted ("
            f"{', '.join(source(s) for s in fit['sources'])}): sd of a run's log time-to-target "
            f"{num(fit['run_log_sd'], 3)} (the headline configurations' paired sd {num(fit['paired_log_sd'], 3)}, "
            f"pooled over {fit['paired_df']} df, / √2); miss rate {pct(fit['miss_rate'])} ({fit['misses']} of "
            f"{fit['compared_runs']} runs, Jeffreys), so the horizon lies {num(fit['horizon_z'])} sd above a run's "
            f"median; crash rate {pct(fit['crash_rate'])} ({fit['crashes']} of {fit['runs']} runs, Jeffreys). Cost: "
            f"{num(entry['cpu_s'], 0)} CPU s, {num(entry['draws_per_cpu_s'])} draws per CPU s. Pooled over the cells: "
            f"false claims in {pct(entry['ratio'])} of the draws (≤ {pct(entry['false_claim_upper'])}), "
            f"{entry['contradictions']} contradictions.", ""] + table(
        ["scenario", "blocks", "noise", "false claims: draws with any, as answered (95 % upper bound)",
         "by the decisions alone", "draws withheld by the control arm", "contradictions: claims",
         "coverage of the true ratio", "power per true ratio", "blocks used (censored), per comparison"], body)

BENCH = {"collective_efficiency": bench_collectives, "stepwise_vs_ring": bench_stepwise_vs_ring,
         "ddp_overlap": bench_ddp_overlap, "framework_overhead": bench_overhead, "sampler_overhead": bench_sampler,
         "noise": bench_noise, "emulation": bench_emulation, "projection_validation": bench_projection,
         "projection_goals": bench_projection_goals, "projection_verdicts": bench_projection_verdicts,
         "link_goodput": bench_link_goodput, "link_cpu": bench_link_cpu, "primary_noise": bench_primary_noise,
         "thesis": bench_thesis, "thesis_projected": bench_thesis_projected,
         "evaluation_share": bench_evaluation_share, "noise_scale": bench_noise_scale,
         "verdict_simulation": bench_verdict_simulation}
SOURCE = {"projection_goals": "projection_validation", "projection_verdicts": "projection_validation",
          "thesis_projected": "thesis"}  # tables of another entry


def bench(name: str, *args: str) -> str:
    if name not in BENCH:
        raise ValueError(f"bench {name}: unknown table (known: {', '.join(BENCH)})")
    entry = load_all()[SOURCE.get(name, name)]
    return "\n".join(caveat(entry, *args[:1]) + BENCH[name](entry, *args))


def simulated_power(entries: dict, blocks: int, effect: float) -> str:
    """The power the verdict itself has at the smallest effect and these blocks, by its simulation (none: '')."""
    cells = [c for c in (entries.get("verdict_simulation") or {}).get("cells", [])
             if c["blocks"] == blocks and c["scenario"] == f"effect x{effect:g}"]
    found = [c["power"].get(f"x{effect:g}") for c in cells]
    if not found or None in found:
        return ""
    return (f"; the verdict's own power there, by simulation (`verdict_simulation`, {', '.join(c['noise'] for c in cells)}"
            f" noise): {' and '.join(pct(p, 0) for p in found)}")


def commands() -> str:
    """The README's first screen: each command, what it answers, its measured elapsed time and what its blocks can
    decide (the headline's default blocks on the noise recorded for its configurations)."""
    entries = load_all()
    share, headline = entries["evaluation_share"], entries["headline"]
    runs = " and ".join(num(r["command_s"] / 60, 1) for r in share["repeats"])
    sweeps = " and ".join(f"{a['wall_s'] / 60:.0f}" for a in headline["answers"])
    blocks, family, strategies = int(yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["repeats"]), 6, \
        ["ps", "ring", "stepwise"]
    primary = Primary("time_to_target", "test_accuracy", 0.95, "isotonic")
    sd, df, _ = planning_noise(EVIDENCE, primary, "digits", "resnet18", strategies)
    upper = upper_log_sd(sd, df)
    effect = float(yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["report"]["smallest_effect"])
    decides = (f"{blocks} blocks: ratios beyond ×/÷{detectable(sd, blocks, family):.2f} at 80 % power after Holm over "
               f"{family} comparisons (×/÷{detectable(upper, blocks, family):.2f} at the noise's 95 % upper bound); "
               f"power at ×/÷{effect:g} (`report.smallest_effect`): {pct(power(sd, blocks, effect, family), 0)} "
               f"({pct(power(upper, blocks, effect, family), 0)} at the bound). Noise: pooled paired log-sd "
               f"{sd:.3f} on {df} df (`primary_noise`, estimator isotonic)" + simulated_power(entries, blocks, effect))
    rows = [["`make run`", "sets up, then trains ResNet18 on the digits data in one process, to the target",
             f"{runs} min ({share['measured_at']}, {describe_machine(share['machine'])})", "one run: no comparison"],
            ["`.venv/bin/python train.py -m strategy=ring,stepwise,ps`",
             "which averaging reaches 95 % test accuracy faster than one process on the same CPUs, and than each "
             "other, on emulated per-host links", f"{sweeps} min in two recorded sweeps ({headline['measured_at']}, "
             f"{describe_machine(headline['machine'])})", decides],
            ["`.venv/bin/python train.py strategy=hivemind peers=8`", "how 8 hivemind peers train, round by round, "
             "and what their averaging costs", "not recorded as a benchmark (the lab log has single runs)",
             "one run: no comparison"], quick_row(entries.get("quick"))]
    return "\n".join(table(["command", "what it answers", "elapsed, measured", "what its blocks can decide"], rows))


def quick_row(entry: dict | None) -> list[str]:
    """The quick comparison's row: its sweep's wall clock and the ratio its blocks detect on the noise it measured
    (bench/quick.py)."""
    row = ["`.venv/bin/python train.py -m experiment=quick strategy=allreduce,stepwise,ps`",
           "the first command's question on the tiny CNN, 200 steps a run, 8 blocks: allreduce, stepwise and ps "
           "against one process on the same CPUs, and against each other"]
    if not entry:
        return row + ["not recorded (`python bench/run.py quick`)", "–"]
    noise = entry["answer"]["noise"]
    decides = "no noise measured" if not (noise and noise["log_sd"]) else (
        f"{noise['blocks']} blocks: ratios beyond ×/÷{noise['detectable']:.2f} at 80 % power after Holm over "
        f"{noise['family']} comparisons, on the noise this sweep measured (paired log-sd {noise['log_sd']:.3f}); "
        f"its report: [Markdown]({entry['samples'][0]}), [HTML]({entry['samples'][1]})")
    return row + [f"{entry['answer']['wall_s'] / 60:.1f} min, one sweep (goal ≤ {entry['goal_s'] / 60:.0f} min: "
                  f"{'met' if entry['goal_met'] else 'missed'}; {entry['measured_at']}, "
                  f"{describe_machine(entry['machine'])})", decides]


GENERATORS = {"commands": commands, "knobs": knobs, "groups": groups, "bench": bench, "bench-summary": bench_summary,
              "bench-machines": bench_machines, "verdict": verdict, "quick-verdict": quick_verdict}


# --- blocks -----------------------------------------------------------------------------
def render(spec: str) -> str:
    name, *args = spec.split()
    if name not in GENERATORS:
        raise ValueError(f"generated:{spec}: unknown generator {name!r} (known: {', '.join(GENERATORS)})")
    return GENERATORS[name](*args)


def regenerated(text: str, page: Path) -> str:
    """The page with every generated block rewritten; a malformed block is an error naming the page."""
    blocks = list(BLOCK.finditer(text))
    markers = len(OPEN.findall(text))
    if markers != 2 * len(blocks):
        raise ValueError(f"{page.name}: {markers} generated markers for {len(blocks)} complete blocks "
                         "(each `<!-- generated:SPEC -->` needs its `<!-- end generated:SPEC -->`)")
    for block in blocks:
        if block["spec"] != block["end"]:
            raise ValueError(f"{page.name}: block generated:{block['spec']} ends as generated:{block['end']}")

    def replace(block: re.Match) -> str:
        spec = block["spec"]
        return f"<!-- generated:{spec} -->\n{render(spec)}\n<!-- end generated:{spec} -->"

    return BLOCK.sub(replace, text)


def stale_pages(pages: list[Path] = PAGES) -> dict[Path, str]:
    """Page -> its text as generated, for every page whose generated blocks differ from what is on disk."""
    stale = {}
    for page in pages:
        text = page.read_text()
        fresh = regenerated(text, page)
        if fresh != text:
            stale[page] = fresh
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated block is stale")
    args = parser.parse_args(argv)
    stale = stale_pages()
    for page, fresh in stale.items():
        if args.check:
            print(f"stale: {page.relative_to(ROOT)} (run `make docs`)", file=sys.stderr)
        else:
            page.write_text(fresh)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

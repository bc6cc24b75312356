"""The report's "Projected to your cluster" (report.project=[LINK:N[:FIELD=VALUE...], ...]): each averaging
configuration predicted on each target (a cluster's shape) from its own completed runs by metrics/projection/, with its
validation's error band."""
from dataclasses import dataclass
from pathlib import Path

from metrics.projection.evidence import Evidence, load_evidence
from metrics.projection.link import Link, parse_link
from metrics.projection.project import (measure, on_cluster, predict_configuration, validation_record,
                                        validation_text)
from metrics.recording.evidence import EVIDENCE
from metrics.report.baselines import averaging
from metrics.report.formats import significant
from metrics.report.model import Table
from metrics.report.runs import Group, Section

COLUMNS = ["configuration", "cluster", "predicted step (s)", "error band (s)", "throughput (samples/s)",
           "time-to-target (s)", "from runs", "mark"]


@dataclass
class Target:
    link: Link
    peers: int

    @property
    def label(self) -> str:
        return f"{self.peers} x {self.link.label}"


SHAPE_FIELDS = {"devices-per-node": int, "intra-node-link": str, "ps-servers": int, "ps-placement": str}


def parse_targets(specs: list[str]) -> list[Target]:
    """report.project's entries: LINK:N[:FIELD=VALUE...], LINK as `python -m metrics.projection --link` takes it
    (`lan`, `wan,40`, `1000`, `1000,0.2`, `1000,0.2,9000`), N the peers (>= 2, devices on nodes of several), each
    FIELD the cluster's shape as the command line's option of that name takes it (SHAPE_FIELDS)."""
    targets = []
    for spec in specs:
        link, peers, *fields = str(spec).split(":") + [""] * (":" not in str(spec))
        if not peers.isdigit() or int(peers) < 2:
            raise ValueError(f"report.project {spec!r}: give LINK:N with N >= 2 peers, e.g. lan:8 or 1000,0.2:16")
        shape = {}
        for field in fields:
            name, _, value = field.partition("=")
            if name not in SHAPE_FIELDS or not value:
                raise ValueError(f"report.project {spec!r}: unknown field {field!r} (FIELD=VALUE, FIELD one of "
                                 f"{', '.join(SHAPE_FIELDS)})")
            try:
                shape[name.replace("-", "_")] = SHAPE_FIELDS[name](value)
            except ValueError:
                raise ValueError(f"report.project {spec!r}: {field!r} is no {SHAPE_FIELDS[name].__name__}") from None
        try:
            targets.append(Target(on_cluster(parse_link(link, "report.project"), [int(peers)], **shape), int(peers)))
        except ValueError as exc:
            raise ValueError(f"report.project {spec!r}: {exc}") from None
    return targets


def group_rows(group: Group, targets: list[Target], evidence: Evidence, left_out: list[str]) -> list[list[str]]:
    """One row per target: the mean prediction over the group's completed runs, their spread, band and marks."""
    measured = []
    for run in group.runs:
        if not run.completed:
            continue
        if run.unfaithful():
            left_out.append(f"{run.path}: did not hold its setting, so it cannot calibrate "
                            f"({'; '.join(run.unfaithful())})")
            continue
        try:
            measured.append(measure(run.path, evidence.payload_shares, evidence))
        except (ValueError, KeyError, OSError) as exc:
            left_out.append(f"{run.path}: {exc}")
    if not measured:
        return []
    validation = evidence.validation(measured[0].strategy)
    rows = []
    for target in targets:
        (row,) = predict_configuration(measured, target.link, [target.peers], validation)["rows"]
        if row["withheld"]:
            rows.append([group.label, target.label, "–", "–", "–", "–", f"{len(measured)}",
                         f"no number: {row['withheld']}"])
            continue
        steps = row["runs_step_s"]
        spread = (f"{len(steps)} (step {significant(min(steps))}–{significant(max(steps))} s)" if len(steps) > 1
                  else "1")
        band = row["band_step_s"]
        rows.append([group.label, target.label, significant(row["step_s"]),
                     f"{significant(band[0])}–{significant(band[1])}" if band else "none",
                     significant(row["throughput_samples_per_s"]), significant(row["time_to_target_s"]), spread,
                     f"UNVALIDATED: {'; '.join(row['unvalidated_why'])}" if row["unvalidated"] else ""])
    return rows


def note(evidence: Evidence) -> str:
    return ("PREDICTED, not measured. Each averaging configuration's strategy cost model (the class its config names: "
            "strategy.cost_model), its parameters taken from each of the configuration's completed runs (compute, "
            "hidden communication, server update, S; python -m metrics.projection), at the target's N on the target "
            f"link's payload rate (nominal rate x the payload share of its frame size: {evidence.goodput_source}). "
            "Predicted "
            "step: mean over the runs (from runs: how many, and their range); throughput = N x batch per worker / "
            "that step; time-to-target only up to the runs' own global batch. Error band: predicted / (1 + e) over "
            "the model's held-out validation errors e (conf/evidence.json projection_validation; none: no validated "
            "case), only inside the validated region. UNVALIDATED (no band): beyond the validated N, wire time over "
            "compute (the model's communication per step over the compute), message size S, or latency. A model that "
            "failed its validation gives no number, only why.")


def projected_tables(sections: list[Section], specs: list[str], results: Path | None = None) -> list[Table]:
    """One table per section from the evidence in `results` (default conf/evidence.json); without rows, it says why."""
    targets = parse_targets(specs)
    try:
        evidence = load_evidence(results or EVIDENCE)
    except ValueError as exc:
        return [Table("Projected to your cluster", COLUMNS, [], f"No projection: {exc}")]
    tables = []
    for section in sections:
        left_out: list[str] = []
        groups = averaging(section.groups)
        rows = [row for group in groups for row in group_rows(group, targets, evidence, left_out)]
        regions = [f"{name}: " + validation_text(validation_record(evidence.validation(name))).strip()
                   for name in dict.fromkeys(g.first.strategy for g in groups)]
        text = ("".join(f"{region}. " for region in regions) + note(evidence)
                + (" Left out: " + "; ".join(left_out) if left_out else "")
                + ("" if groups else " This section has no averaging configuration to project."))
        tables.append(Table(f"Projected to your cluster: {section.title}", COLUMNS, rows, text))
    return tables

"""What the evidence file (conf/evidence.json) lets a prediction say: a link's payload share per frame size
(link_goodput), each cost model's validation and region (projection_validation), and the batch scaling check
(noise_scale); the rules are in docs/projection.md."""
import json
from dataclasses import dataclass, field
from pathlib import Path

from metrics.projection.batch_scaling import checked_noise_scale
from metrics.projection.link import Link
from metrics.recording.evidence import EVIDENCE
from metrics.recording.formats import number
from metrics.summary.bounds import ETHERNET_MTU


SIZE_SLACK = 0.02  # S measured from byte counters differs by a few headers between runs of one model


@dataclass(frozen=True)
class CheckedCase:
    """Where one held-out, counted case lies on the region's axes (its link rate is kept for the record)."""

    peers: int
    wire_over_compute: float  # the model's communication per step over its compute, at the case (Measured.wire_s)
    size_bytes: float         # S, the bytes averaged per round
    mbit: float               # the case's nominal link rate


@dataclass
class Validation:
    """One cost model's held-out, counted validation cases. Its region, on axes that carry over to other links and
    machines: at N, the wire-time-over-compute and message sizes spanned by the cases at N or more (a case checks its
    own N and below). Latency is not an axis: the cases ran without any."""

    strategy: str
    errors: list[float]             # predicted / measured step - 1, one per case
    checked: list[CheckedCase]
    latency_ms: float               # the largest one-way latency they ran with
    failed: str | None              # why the model failed its validation; None: it met its goal
    source: str                     # where and when

    @property
    def cases(self) -> int:
        return len(self.errors)

    @property
    def largest_peers(self) -> int:
        return max((case.peers for case in self.checked), default=0)

    @property
    def rates_mbit(self) -> list[float]:
        return sorted({case.mbit for case in self.checked})

    def at(self, peers: int) -> list[CheckedCase]:
        """The cases at `peers` or more: those that validate `peers`."""
        return [case for case in self.checked if case.peers >= peers]

    def spans_at(self, peers: int) -> tuple[tuple[float, float], tuple[float, float]]:
        """(lowest, highest) wire time over compute and (lowest, highest) S validated at `peers`."""
        cases = self.at(peers)
        ratios, sizes = [c.wire_over_compute for c in cases], [c.size_bytes for c in cases]
        return (min(ratios), max(ratios)), (min(sizes), max(sizes))

    @property
    def region_text(self) -> str:
        """Per range of N, its validated spans ("N <= 2: wire/compute 0.518-255, S 0.751-44.7 MB; N 3-8: ...")."""
        ranges: list[list] = []  # [lowest N, highest N, spans]: neighbouring N with the same spans share one
        for n in sorted({case.peers for case in self.checked}):
            spans = self.spans_at(n)
            if ranges and ranges[-1][2] == spans:
                ranges[-1][1] = n
            else:
                ranges.append([ranges[-1][1] + 1 if ranges else 1, n, spans])
        return "; ".join(f"{n_range_text(low, high)}: wire/compute {span_text(ratios)}, S {span_text(sizes, 1e6, 'MB')}"
                         for low, high, (ratios, sizes) in ranges)

    def band(self, step_s: float) -> list[float]:
        """[low, high] of the step the validated errors allow: step / (1 + e) over the held-out errors e."""
        return [step_s / (1 + max(self.errors)), step_s / (1 + min(self.errors))]

    def beyond(self, peers: int, link: Link, wire_over_compute: float, size_bytes: float) -> list[str]:
        """Where a prediction at `peers` on `link`, with this wire time over compute and S, lies outside what the
        held-out cases covered (empty: inside); beyond the largest N, it is judged against that N's spans."""
        at = min(peers, self.largest_peers)
        (low, high), (smallest, largest) = self.spans_at(at)
        return [why for outside, why in (
            (peers > self.largest_peers, f"N={peers} > the largest validated N={self.largest_peers}"),
            (not low <= wire_over_compute <= high, f"wire/compute {number(wire_over_compute)} outside the "
                                                   f"{span_text((low, high))} validated at N={at}"),
            (not smallest * (1 - SIZE_SLACK) <= size_bytes <= largest * (1 + SIZE_SLACK),
             f"S {number(size_bytes / 1e6)} MB outside the {span_text((smallest, largest), 1e6, 'MB')} validated at "
             f"N={at}"),
            (link.latency_ms > self.latency_ms, f"latency {link.latency_ms:g} ms > the validated "
                                                f"{self.latency_ms:g} ms (the cases ran without latency)"),
            (link.devices_per_node > 1, f"nodes of {link.devices_per_node} devices: no validated case (every case "
                                        "ran one worker per link)"),
            (link.ps_placement == "colocated", "co-located ps servers: no validated case (every case ran each server "
                                               "on a link of its own)")) if outside]


def n_range_text(low: int, high: int) -> str:
    return f"N <= {high}" if low == 1 else f"N = {high}" if low == high else f"N {low}-{high}"


def span_text(span: tuple[float, float], scale: float = 1.0, unit: str = "") -> str:
    """"0.518-84.9", "0.751-44.7 MB": three significant digits, no exponent."""
    low, high = (f"{float(f'{value / scale:.3g}'):g}" for value in span)
    text = low if low == high else f"{low}-{high}"
    return f"{text} {unit}" if unit else text


@dataclass
class Evidence:
    payload_shares: dict[int, float]  # payload / nominal rate of a link, by its frame size in bytes (link_goodput)
    goodput_source: str
    validations: dict[str, Validation]
    results: list[dict] = field(default_factory=list)  # every entry of the results file

    def validation(self, strategy: str) -> Validation | None:
        return self.validations.get(strategy)

    def batch_scaling(self, model: str | None, lr_scaling: str) -> dict | None:
        """The passed noise-scale check for this model and lr rule (metrics/projection/batch_scaling.py), or None."""
        return checked_noise_scale(self.results, model, lr_scaling)


def unvalidated(validation: Validation | None, peers: int, link: Link, wire_over_compute: float,
                size_bytes: float) -> list[str]:
    """Why a prediction lies outside the validated region (empty: inside)."""
    if validation is None:
        return ["the strategy's cost model has no validated case"]
    return validation.beyond(peers, link, wire_over_compute, size_bytes)


def failure(strategy: str, verdict: dict) -> str | None:
    """Why a model failed its validation (its worst held-out case against its goal), from the verdict
    bench/projection.py recorded; None where it met the goal."""
    if verdict["met"]:
        return None
    worst = verdict["worst"]
    unchecked = "" if verdict.get("checked", True) else " (a case not checked for fidelity, until checked ones do)"
    return (f"{strategy}'s cost model failed its validation: held-out error {worst['error']:+.1%} at "
            f"N={worst['peers']}, {worst['link_mbit']:g} Mbit/s (model {worst['model']}), beyond its goal of "
            f"±{verdict['goal']:.0%}" + unchecked)


def checked_case(row: dict, source: str) -> CheckedCase:
    if "wire_over_compute" not in row:
        raise ValueError(f"{source}: a counted case of {row['strategy']} at N={row['peers']} records no "
                         "wire_over_compute: run its grid again (python bench/run.py projection)")
    return CheckedCase(int(row["peers"]), float(row["wire_over_compute"]), float(row["size_bytes"]),
                       float(row["link_mbit"]))


def validations(entry: dict, source: str) -> dict[str, Validation]:
    rows = [r for r in entry.get("rows", []) if r.get("role") == "held-out" and r.get("counted")]
    found = {}
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        verdicts = entry.get("verdicts") or {}
        if strategy not in verdicts:
            raise ValueError(f"{source}: projection_validation has held-out cases of {strategy} but no verdict: save "
                             "it again (python bench/run.py projection, or bench.projection.merge)")
        found[strategy] = Validation(
            strategy, [r["error"] for r in mine], [checked_case(r, source) for r in mine],
            max(float(r.get("latency_ms") or 0.0) for r in mine), failure(strategy, verdicts[strategy]), source)
    for strategy, verdict in (entry.get("verdicts") or {}).items():  # a miss in cases not checked for fidelity
        if strategy not in found and not verdict["met"]:
            worst = verdict["worst"]
            found[strategy] = Validation(strategy, [worst["error"]], [], 0.0, failure(strategy, verdict), source)
    return found


def payload_shares(goodput: dict) -> dict[int, float]:
    """The link_goodput entry's payload share by frame size (an entry without by_mtu measured standard frames)."""
    by_mtu = goodput.get("by_mtu") or {str(ETHERNET_MTU): goodput}
    return {int(mtu): float(found["payload_share"]) for mtu, found in by_mtu.items()}


def load_evidence(path: Path = EVIDENCE) -> Evidence:
    """The payload share and the validations recorded in an evidence file (or a results file of the same form)."""
    if not path.exists():
        raise ValueError(f"no evidence file {path}: the projection needs its link_goodput "
                         "(python bench/run.py goodput)")
    entries = {r["name"]: r for r in json.loads(path.read_text())["results"]}
    goodput = entries.get("link_goodput")
    if goodput is None:
        raise ValueError(f"{path} holds no link_goodput: run `python bench/run.py goodput` to measure the payload "
                         "share a projection converts a link's nominal rate with")
    validation = entries.get("projection_validation") or {}
    shares = payload_shares(goodput)
    return Evidence(shares,
                    f"{path} link_goodput, measured {goodput.get('measured_at')}: payload share "
                    + ", ".join(f"{share:.3f} in {mtu}-byte frames" for mtu, share in sorted(shares.items())),
                    validations(validation, f"{path} projection_validation, measured up to "
                                            f"{validation.get('measured_at')}"), list(entries.values()))
